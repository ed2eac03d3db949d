"""Each side's probe processes run in a sandbox of their own (issue 29, perfcheck/runner/process/sandbox.py):
head's code cannot rewrite base's tree, perfcheck's install or base's compile cache, cannot reach the
orchestrator's descriptors, and shares no /tmp with anything. Performed by a hostile head as a PR
would write it, in real probe processes, forked from a fork server and started fresh."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ReviewFn, model_tree, write_tree
from hostile_head import ATTACKS, HOSTILE, attacks_in

from perfcheck import preflight
from perfcheck.runner import orchestrate
from perfcheck.runner.process import sandbox, sides
from perfcheck.runner.process.forkserver import DISABLE_ENV as FORKSERVER_ENV
from perfcheck.runner.process.sides import SHARED_CACHE_ENV, interpreter_folders

needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)


@needs_sandbox
@pytest.mark.parametrize("started", ["forked", "fresh"])
def test_head_cannot_touch_base_perfcheck_caches_or_the_orchestrator(
    review: ReviewFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: str
) -> None:
    # Per-side caches, as a review in Actions has them (the suite's shared one is a test knob).
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    if started == "fresh":
        monkeypatch.setenv(FORKSERVER_ENV, "0")
    base = model_tree(tmp_path / "base")
    original = (base / "model.py").read_text()
    source = HOSTILE.format(base_model=str(base / "model.py"), orchestrator=os.getpid())
    head = write_tree(tmp_path / "head", {"model.py": source})
    (Path("/tmp") / "perfcheck-sandbox-attack").unlink(missing_ok=True)

    # The review deletes its caches at its end; kept here, to look at base's after head's attack.
    real_rmtree = orchestrate.shutil.rmtree

    def keep_caches(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if Path(path).name != "cache":
            real_rmtree(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(orchestrate.shutil, "rmtree", keep_caches)
    result = review(base, head, probes=("compile", "export"))

    outcomes = attacks_in(tmp_path / "out")
    assert set(ATTACKS) <= set(outcomes), outcomes
    broke = {name: how for name, how in outcomes.items() if not how.startswith("held")}
    assert not broke, broke
    assert (base / "model.py").read_text() == original
    assert (tmp_path / "out" / "probes" / "cache" / "base-net").is_dir()  # kept, to be looked at
    assert not (tmp_path / "out" / "probes" / "cache" / "base-net" / "poison").exists()
    assert not (Path("/tmp") / "perfcheck-sandbox-attack").exists()
    # Base measured its own code: the IR change head made is found, not hidden by a poisoned base.
    assert "export_ir_changed" in {f.category for f in result.findings}
    assert all(r.status == "ok" for wl in result.workloads for r in [*wl.base, *wl.head])


def _sandboxed(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by this interpreter in a sandbox that shows it and nothing of the review."""
    walls = json.dumps(
        {"scratch": str(tmp_path / "scratch"), "writable": [], "hidden": [], "visible": _interpreter()}
    )
    return subprocess.run(
        sandbox.command(walls, [sys.executable, "-c", script]), capture_output=True, text=True, check=False
    )


def _interpreter() -> list[str]:
    """What this interpreter needs to be seen inside a sandbox: its folders, as a review's walls
    list them (a checkout under /tmp, whose /tmp the sandbox replaces, is then still seen)."""
    return [str(p) for p in interpreter_folders(sys.executable)]


@pytest.mark.e2e
@needs_sandbox
def test_heads_copy_of_bases_cache_is_where_bases_is_and_base_keeps_its_own(tmp_path: Path) -> None:
    """Cache entries name the folder they were compiled in (Triton's groups, a kernel's autotuning
    file beside it): head's processes see their own copy of base's cache at base's path, write
    there, and base's folder stays as base left it."""
    cache, copy, scratch = tmp_path / "base-cache", tmp_path / "base-for-head", tmp_path / "scratch"
    cache.mkdir()
    (cache / "kernel.best_config").write_text("base")
    copy.mkdir()
    (copy / "kernel.best_config").write_text("base")
    walls = json.dumps(
        {
            "scratch": str(scratch),
            "writable": [],
            "hidden": [],
            "visible": _interpreter(),
            "moved": [[str(copy), str(cache)]],
        }
    )
    script = f"""
path = {str(cache / "kernel.best_config")!r}
assert open(path).read() == "base"
open(path, "w").write("head's")
open({str(cache / "new.py")!r}, "w").write("head's")
"""
    done = subprocess.run(
        sandbox.command(walls, [sys.executable, "-c", script]), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert (cache / "kernel.best_config").read_text() == "base" and not (cache / "new.py").exists()
    assert (copy / "kernel.best_config").read_text() == "head's" and (copy / "new.py").exists()


@pytest.mark.e2e
@needs_sandbox
def test_a_sandboxed_process_sees_its_own_tree_and_writes_only_its_own_folders(tmp_path: Path) -> None:
    """The launcher around a fresh process, as the orchestrator starts one: the own tree readable,
    the hidden tree gone, the writable folder and /tmp writable, exit code passed through."""
    own, other, cache, scratch = (tmp_path / n for n in ("own", "other", "cache", "scratch"))
    for folder in (own, other, cache):
        folder.mkdir()
    (own / "mine.txt").write_text("mine")
    (other / "theirs.txt").write_text("theirs")
    (tmp_path / "elsewhere.txt").write_text("the machine's /tmp")
    walls = json.dumps(
        # "/tmp" asked to be visible too: never granted, the machine's /tmp stays out of sight.
        {
            "scratch": str(scratch),
            "writable": [str(cache)],
            "hidden": [str(other)],
            "visible": [str(own), "/tmp", *_interpreter()],
        }
    )
    script = f"""
import os, sys
assert open({str(own / "mine.txt")!r}).read() == "mine"
assert not os.path.exists({str(other / "theirs.txt")!r})
assert not os.path.exists({str(tmp_path / "elsewhere.txt")!r})
open({str(cache / "written")!r}, "w").write("ok")
open("/tmp/scratch-file", "w").write("ok")
for path in ({str(own / "new")!r}, {sys.prefix + "/planted"!r}):
    try:
        open(path, "w")
    except OSError:
        pass
    else:
        sys.exit(9)
assert os.getpid() == 1
sys.exit(7)
"""
    done = subprocess.run(
        sandbox.command(walls, [sys.executable, "-c", script]), capture_output=True, text=True, check=False
    )
    assert done.returncode == 7, done.stderr
    assert (cache / "written").read_text() == "ok"
    assert (scratch / "scratch-file").read_text() == "ok"
    assert not (own / "new").exists()


def test_actions_refuses_a_review_without_a_sandbox_or_with_one_shared_cache() -> None:
    actions = {"GITHUB_ACTIONS": "true"}
    with pytest.raises(preflight.SetupError, match="user namespaces"):
        preflight.sandboxed(actions, lambda: "unshare: Operation not permitted")
    with pytest.raises(preflight.SetupError, match=SHARED_CACHE_ENV):
        preflight.sandboxed({**actions, SHARED_CACHE_ENV: "/tmp/cache"}, lambda: None)
    # Elsewhere the review runs and says the sides are not isolated; an operator may turn it off.
    isolated, warning = preflight.sandboxed({}, lambda: "unshare: Operation not permitted")
    assert not isolated and warning is not None and "unisolated" in warning
    isolated, warning = preflight.sandboxed({**actions, sandbox.DISABLE_ENV: "0"}, lambda: None)
    assert not isolated and warning is not None and "can change what base measures" in warning
    assert preflight.sandboxed(actions, lambda: None) == (True, None)


@pytest.mark.e2e
@needs_sandbox
def test_an_import_path_the_sandbox_hides_is_refused_before_any_probe_and_pythonpath_is_shown(
    tmp_path: Path,
) -> None:
    # Issue 40: a workload importable only from a PYTHONPATH folder under /tmp passed the
    # pre-flight check, then every sandboxed probe failed with "No module named …" (each side's
    # /tmp is its own). PYTHONPATH's folders are now shown to the probes read-only, and the check
    # imports as the probes do, behind the walls: a folder they still cannot see (one inside the
    # other side's tree) is bad input, named, before any probe.
    lib = {"src/tmp_only_pkg/__init__.py": "def build(device):\n    raise SystemExit\n"}
    config = "workloads:\n  - {name: net, entry: tmp_only_pkg:build}\n"
    base = write_tree(tmp_path / "base", {"perfcheck.yml": config, **lib})
    head = write_tree(tmp_path / "head", {"perfcheck.yml": config})
    env = {k: v for k, v in os.environ.items() if k != sandbox.DISABLE_ENV} | {
        "PYTHONPATH": str(base / "src")
    }
    out = tmp_path / "out"
    command = [sys.executable, "-m", "perfcheck", "review", "--base", str(base), "--head", str(head)]
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = f"--head: {base / 'src'} is on the probes' import path, but it lies in {base}, which the sandbox"
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not list(out.glob("probes/*.log"))
    # Under /tmp (this test's folder), outside both trees: shown to both sides' probes, which import
    # the workload from it.
    model = "import torch\ndef build(device):\n    return torch.nn.Linear(4, 2), (torch.randn(3, 4),)\n"
    lib = write_tree(tmp_path / "lib", {"shown_pkg/__init__.py": model})
    config = "workloads:\n  - {name: net, entry: shown_pkg:build}\n"
    base, head = (write_tree(tmp_path / f"{side}2", {"perfcheck.yml": config}) for side in ("base", "head"))
    command = [sys.executable, "-m", "perfcheck", "review", "--base", str(base), "--head", str(head)]
    done = subprocess.run(
        [*command, "--out", str(out), "--probes", "export"],
        capture_output=True, text=True, env=env | {"PYTHONPATH": str(lib)}, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@needs_sandbox
def test_a_sides_tmp_and_files_folder_start_empty_in_each_review(review: ReviewFn, tmp_path: Path) -> None:
    # Issue 45: a side's /tmp (its scratch folder) and files folder carried over to the next review
    # in the same output folder, so PR code of one review could leave files for the next.
    probes_dir = tmp_path / "out" / "probes"
    planted = [probes_dir / "scratch" / "head" / "left-by-pr", probes_dir / "files" / "head" / "probes.json"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("planted")
    result = review(model_tree(tmp_path / "base"), model_tree(tmp_path / "head"), probes=("export",))
    assert result.verdict == "pass"
    assert not [p for p in planted if p.exists()]


def test_merging_base_cache_into_heads_never_writes_through_a_link_head_planted(tmp_path: Path) -> None:
    # Issue 45: head's code planted links in its own compile cache; merging base's cache into it
    # followed them and wrote base's files into a folder head chose.
    base, head, elsewhere = tmp_path / "base-cache", tmp_path / "head-cache", tmp_path / "elsewhere"
    write_tree(base, {"inductor/ab/kernel.py": "base's kernel", "triton/cd/k.json": "{}"})
    elsewhere.mkdir()
    (head / "inductor").mkdir(parents=True)
    (head / "inductor" / "ab").symlink_to(elsewhere, target_is_directory=True)
    (head / "triton").symlink_to(elsewhere, target_is_directory=True)
    sides.merge_caches(head, [base])
    assert list(elsewhere.iterdir()) == []
    for part in ("inductor/ab", "triton", "triton/cd"):
        assert (head / part).is_dir() and not (head / part).is_symlink(), part
    assert (head / "inductor" / "ab" / "kernel.py").read_text() == "base's kernel"


@pytest.mark.e2e
@needs_sandbox
def test_no_socket_folder_sysctl_or_supplementary_group_of_the_machine_reaches_a_sandbox(
    tmp_path: Path,
) -> None:
    # Issue 45: a stand-in privileged daemon listening on a socket under /run was reached through
    # connect() (read-only mounts do not stop it) and rewrote base's tree; as uid 0 a probe wrote
    # the machine's kernel.core_pattern; issue 55: its IRQ affinities through /proc/irq.
    import socket

    run = Path("/run")
    if not run.is_dir() or not os.access(run, os.W_OK):
        pytest.skip("no writable /run to put a stand-in daemon's socket in")
    path = run / f"perfcheck-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        script = f"""
import os, socket, sys
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    c.connect({str(path)!r})
except OSError:
    pass
else:
    sys.exit(11)
try:
    open("/proc/sys/kernel/core_uses_pid", "r+b")
except OSError:
    pass
else:
    sys.exit(12)
import glob
for knob in ["/proc/irq/default_smp_affinity", *glob.glob("/proc/irq/*/smp_affinity")[:2]]:
    try:
        open(knob, "r+b")
    except OSError:
        pass
    else:
        sys.exit(14)  # issue 55: as root, the machine's interrupts moved
if os.geteuid() == 0 and os.getgroups():
    sys.exit(13)
sys.exit(7)
"""
        done = _sandboxed(tmp_path, script)
        assert done.returncode == 7, done.stderr
    finally:
        server.close()
        path.unlink(missing_ok=True)


PR_SET_DUMPABLE = 4


@pytest.fixture
def group_daemon() -> Iterator[tuple[str, Callable[[], None]]]:
    """A stand-in privileged daemon: a socket file outside /run and /tmp that only its group may
    reach (mode 0660, as /var/run/docker.sock is for the runner user on GitHub's hosted runners),
    and how a forked process becomes a user who has that group as a supplementary one: as root,
    uid 65534 with group 4242; as another user, that user, where it has a supplementary group."""
    if os.geteuid() == 0:
        group = 4242

        def become() -> None:
            os.setgroups([group])
            os.setgid(65534)
            os.setuid(65534)
            # As a process the user started would be: one that changed its uid is not dumpable,
            # and its /proc/self (uid_map) then stays root's.
            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)

    else:
        extra = [g for g in os.getgroups() if g != os.getegid()]
        if not extra:
            pytest.skip("this user has no supplementary group to own the daemon's socket")
        group = extra[0]

        def become() -> None:
            pass

    folder = Path(tempfile.mkdtemp(prefix="perfcheck-test-daemon-", dir="/var/tmp"))
    folder.chmod(0o777)  # the user's scratch folder goes here too
    path = folder / "daemon.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    os.chown(path, -1, group)
    path.chmod(0o660)
    try:
        yield str(path), become
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def _reaches(path: str, become: Callable[[], None], walls: sandbox.View | None) -> bool:
    """Whether a process forked from this one, as the user ``become`` makes it, behind ``walls``
    (None: none), can connect() to the socket file at ``path``. Forked rather than started so
    that no interpreter needs to be readable by that user (this one may live in /root)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            become()
            if walls is not None:
                sandbox.enter(walls)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                try:
                    client.connect(path)
                except OSError:
                    os._exit(7)  # refused: what a sandbox is for
                client.sendall(b"rewrite base's model.py")
        except BaseException as err:  # a forked child reports by its pipe and exit code only
            os.write(write, repr(err).encode())
            os._exit(9)
        os._exit(11)
    os.close(write)
    with os.fdopen(read, "rb") as why:
        said = why.read().decode()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (7, 11), f"the forked client ended with {code}: {said}"
    return code == 11


@needs_sandbox
def test_a_socket_its_supplementary_group_owns_outside_run_cannot_be_reached(
    group_daemon: tuple[str, Callable[[], None]],
) -> None:
    # Issue 45: a user namespace cannot drop a non-root user's supplementary groups, and a read-only
    # mount does not stop connect(): every socket file the machine has bound is covered instead.
    path, become = group_daemon
    assert _reaches(path, become, None), "the user cannot reach the daemon outside a sandbox: nothing tested"
    walls = sandbox.View(scratch=str(Path(path).parent / "scratch"), visible=tuple(_interpreter()))
    assert not _reaches(path, become, walls)


@pytest.mark.e2e
@needs_sandbox
def test_a_sandbox_shows_only_the_devices_a_probe_uses(tmp_path: Path) -> None:
    # Issue 45: PR code opened /dev/kmsg for writing and opened /dev/kvm (a device on a read-only
    # mount stays writable, so the sandbox's /dev holds only what probes use).
    script = """
import os, sys
names = set(os.listdir("/dev"))
assert names >= {"null", "zero", "urandom", "shm", "fd"}, names
for gone in ("kmsg", "kvm", "mem", "vda", "sda", "loop0", "tty0", "console", "log"):
    assert gone not in names, gone
with open("/dev/null", "wb") as null:
    null.write(b"x")
assert len(open("/dev/urandom", "rb").read(8)) == 8
open("/dev/shm/segment", "w").write("x")
assert os.listdir("/proc/self/fd") and os.path.exists("/dev/stdout")
sys.exit(7)
"""
    walls = json.dumps(
        {"scratch": str(tmp_path / "s"), "writable": [], "hidden": [], "visible": _interpreter()}
    )
    done = subprocess.run(
        sandbox.command(walls, [sys.executable, "-c", script]), capture_output=True, text=True, check=False
    )
    assert done.returncode == 7, done.stderr


@pytest.fixture
def daemon_names(tmp_path: Path) -> Iterator[list[str]]:
    """A stand-in daemon's socket where the machine keeps state (/var/tmp, else the home folder),
    bound by a relative name (``/proc/net/unix`` then prints just ``d.sock``), and the other names
    it has: a hard link in another folder, the same folder bound elsewhere. Issue 55: each reached
    the daemon while the sandbox covered the sockets it could list."""
    import subprocess as sp

    parent = next((p for p in ("/var/tmp", str(Path.home())) if os.access(p, os.W_OK)), None)
    if parent is None:
        pytest.skip("no writable folder outside /tmp for a stand-in daemon")
    folder = Path(tempfile.mkdtemp(prefix="perfcheck-daemon-", dir=parent))
    other = Path(tempfile.mkdtemp(prefix="perfcheck-daemon-link-", dir=parent))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    os.chdir(folder)
    try:
        server.bind("d.sock")
    finally:
        os.chdir(here)
    server.listen(8)
    os.link(folder / "d.sock", other / "linked.sock")
    names = [str(folder / "d.sock"), str(other / "linked.sock")]
    mirror = Path(tempfile.mkdtemp(prefix="perfcheck-daemon-mirror-", dir=parent))
    mounted = sp.run(["mount", "--bind", str(folder), str(mirror)], capture_output=True, check=False)
    if mounted.returncode == 0:
        names.append(str(mirror / "d.sock"))
    try:
        yield names
    finally:
        server.close()
        if mounted.returncode == 0:
            sp.run(["umount", str(mirror)], check=False)
        for path in (folder / "d.sock", other / "linked.sock"):
            path.unlink(missing_ok=True)
        for path in (folder, other, mirror):
            with contextlib.suppress(OSError):
                path.rmdir()


@pytest.mark.e2e
@needs_sandbox
def test_no_name_of_a_machine_socket_reaches_a_sandbox(tmp_path: Path, daemon_names: list[str]) -> None:
    """The sandbox's root holds only what it was given: the machine's /var, /home, /root do not
    exist there, so the daemon is reached by none of its names; the interpreter still runs."""
    visible = _interpreter()
    # Folders of the machine the sandbox was not given (one that holds a folder it was given, the
    # interpreter under /root/.pyenv, say, holds only that path).
    gone = [
        p
        for p in ("/var", "/home", "/root", "/run", "/mnt")
        if not any(v.startswith(p + "/") for v in visible)
    ]
    script = f"""
import os, socket, sys
for name in {daemon_names!r}:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        c.connect(name)
    except OSError:
        continue
    sys.exit(11)
for gone in {gone!r}:
    if os.path.exists(gone):
        sys.exit(12)
import json  # the interpreter's own library still imports
sys.exit(7)
"""
    done = _sandboxed(tmp_path, script)
    assert done.returncode == 7, (done.returncode, done.stderr)


@pytest.mark.e2e
@needs_sandbox
def test_a_folder_the_operator_names_is_shown_read_only_and_nothing_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = next((p for p in ("/var/tmp", str(Path.home())) if os.access(p, os.W_OK)), None)
    if parent is None:
        pytest.skip("no writable folder outside /tmp")
    data = Path(tempfile.mkdtemp(prefix="perfcheck-data-", dir=parent))
    beside = Path(tempfile.mkdtemp(prefix="perfcheck-beside-", dir=parent))
    try:
        (data / "rows.csv").write_text("1,2\n")
        monkeypatch.setenv(sandbox.READ_ENV, str(data))
        script = f"""
import sys
assert open({str(data / "rows.csv")!r}).read() == "1,2\\n"
try:
    open({str(data / "new")!r}, "w")
except OSError:
    pass
else:
    sys.exit(11)
import os
sys.exit(12 if os.path.exists({str(beside)!r}) else 7)
"""
        done = _sandboxed(tmp_path, script)
        assert done.returncode == 7, (done.returncode, done.stderr)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(beside, ignore_errors=True)
