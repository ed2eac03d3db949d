"""The custom_ops probe: ``torch.library.opcheck`` on each custom op the workload calls.

One eager step runs under a TorchDispatchMode that snapshots the arguments of the first call of
every operator outside PyTorch's own namespaces (or, when the config names namespaces, inside
those). opcheck then runs on exactly those arguments, so the fake kernel is compared with the
real one on the shapes, dtypes and devices the model really uses, not on made-up samples.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from perfcheck.core.probes.custom_ops import CustomOpCheck, CustomOpMetrics, CustomOpsSettings, is_custom
from perfcheck.measures import SourceLocation
from perfcheck.runner import step as steps
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.runner.source.locate import to_location
from perfcheck.spec import ProbeSpec

MESSAGE_LIMIT = 2000

Call = tuple[tuple[Any, ...], dict[str, Any]]


def op_label(op: torch._ops.OpOverload) -> str:
    overload = op._overloadname
    return op._schema.name + ("" if overload == "default" else f".{overload}")


def _snapshot(call: Call, keep_grad: bool) -> Call:
    # A copy, because the op or a later one may write into its inputs. An inference step never
    # differentiates through the op, so its inputs do not require grad there and opcheck must not
    # ask for a backward the workload never runs.
    def copy(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        out = x.detach().clone()
        return out.requires_grad_(keep_grad and x.requires_grad)

    return tree_map(copy, call)


class _FirstCalls(TorchDispatchMode):
    def __init__(self, wanted: Callable[[str], bool], keep_grad: bool) -> None:
        super().__init__()
        self.wanted = wanted
        self.keep_grad = keep_grad
        self.calls: dict[torch._ops.OpOverload, Call] = {}

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func not in self.calls and self.wanted(func.namespace):
            self.calls[func] = _snapshot((args, kwargs), self.keep_grad)
        return func(*args, **kwargs)


def describe(err: object) -> str:
    text = f"{type(err).__name__}: {str(err).strip()}" if isinstance(err, BaseException) else str(err)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " …"


def summarize(op: str, results: dict[str, Any]) -> CustomOpCheck:
    """One op's opcheck results (check name -> "SUCCESS" or the exception), first failure first."""
    failed = [(check, outcome) for check, outcome in results.items() if outcome != "SUCCESS"]
    if not failed:
        return CustomOpCheck(op=op, ok=True)
    check, outcome = failed[0]
    message = describe(outcome)
    if len(failed) > 1:
        message += f"\n(also fails: {', '.join(c for c, _ in failed[1:])})"
    return CustomOpCheck(op=op, ok=False, failed_check=check, message=message)


def opcheck(op: torch._ops.OpOverload, call: Call, tree: Path | None = None) -> CustomOpCheck:
    args, kwargs = call
    try:
        results = torch.library.opcheck(op, args, kwargs, raise_exception=False)
    except Exception as err:  # opcheck refusing the op is itself the result, not a probe crash
        return CustomOpCheck(op=op_label(op), ok=False, message=f"opcheck could not run: {describe(err)}")
    check = summarize(op_label(op), results)
    if not check.ok and tree is not None:
        check = check.model_copy(update={"fake_at": fake_kernel_at(op._schema.name, tree)})
    return check


def fake_kernel_at(qualname: str, tree: Path) -> SourceLocation | None:
    """Where ``qualname``'s fake kernel is registered: the function a ``torch.library.custom_op``
    took with ``register_fake`` (its first line, the decorator's), else the call that registered it
    through ``torch.library.register_fake``, as torch records it (``file:line``)."""
    from torch._library import custom_ops, simple_registry

    opdef = custom_ops.OPDEFS.get(qualname)
    fn = getattr(opdef, "_abstract_fn", None)
    if fn is not None:
        try:
            path = inspect.getsourcefile(fn)
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            path = None
        if path:
            return to_location(traceback.FrameSummary(path, line, fn.__name__), tree)
    kernel = simple_registry.singleton.find(qualname).fake_impl.kernel
    source = getattr(kernel, "source", None)
    if isinstance(source, str) and ":" in source:
        path, _, line_text = source.rpartition(":")
        if line_text.isdigit():
            return to_location(traceback.FrameSummary(path, int(line_text), "register_fake"), tree)
    return None


def registered_ops(namespaces: list[str]) -> list[str]:
    return sorted(
        name for name in torch._C._dispatch_get_all_op_names() if name.split("::", 1)[0] in namespaces
    )


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: CustomOpsSettings) -> ProbeOutput:
    wl = spec.workload
    configured = settings.namespaces
    built = build()
    model = steps.prepare(built.model, wl.train)
    step = steps.make_step(model, wl.train, wl.amp, spec.device)
    recorder = _FirstCalls(lambda ns: is_custom(ns, configured), keep_grad=wl.train)
    details: dict[str, Any] = {}
    try:
        with recorder:
            step(*built.inputs)
        steps.synchronize(spec.device)
    except Exception as err:
        # A custom op's own bug (no autograd formula, a bad kernel) often stops the step; the
        # calls recorded before it are what opcheck needs to say which registration is wrong.
        if not recorder.calls:
            raise
        details["step_error"] = describe(err)

    calls = sorted(recorder.calls.items(), key=lambda kv: str(kv[0]))
    checks = [opcheck(op, call, Path(spec.tree)) for op, call in calls]
    if configured:
        called = {op._schema.name for op in recorder.calls}
        # opcheck needs real arguments; an op the workload never calls has none to offer.
        unexercised = [name for name in registered_ops(configured) if name not in called]
        if unexercised:
            details["not_exercised"] = unexercised
    return ProbeOutput(metrics=CustomOpMetrics(ops=checks), details=details)
