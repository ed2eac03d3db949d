"""What a fork server does before it forks its first child: import torch, Dynamo, Inductor and
the probes, make one small CPU compile, and build Inductor's precompiled C++ headers in a
folder of its own; all without initializing CUDA's driver, which a forked child could then not
use (bench/cuda_fork.py measured which import does). perfcheck/runner/process/forkserver.py serves.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any


def preimport(inductor: bool = True) -> str | None:
    """Import what every probe process imports; the reason not to serve, if any. Besides torch,
    Dynamo and export: what a process's first torch.compile imports on the way, whatever the
    backend (aot_eager too goes through Inductor's modules), about 0.9 s of a 1.3 s first compile.
    With ``inductor``, the server's children compile with Inductor, and it pays their first
    Inductor compile's fixed part too (``first_compile``); without, none of them would use it."""
    import torch
    import torch._dynamo
    import torch._dynamo.backends.common
    import torch._functorch.aot_autograd
    import torch._inductor.compile_fx
    import torch.export

    from perfcheck.runner.probes.lookup import load_builtin

    load_builtin()
    if torch.cuda.is_initialized() or cuda_driver_initialized():
        return "CUDA was initialized while importing; a child forked now could not use CUDA"
    # The CPU compile not where a GPU is: on the H200 it initialized CUDA's driver
    # (bench/cuda_fork.py) and took 48-57 s, which every probe waits for.
    if inductor and not torch.cuda.device_count():  # through NVML (NVML_CHECK), which initializes nothing
        headers_of_the_server()
        first_compile()
    release_nvml()
    # Checked again: where NVML cannot answer, the count asks CUDA itself.
    if cuda_driver_initialized():
        return "CUDA was initialized while warming up; a child forked now could not use CUDA"
    return None


def first_compile() -> None:
    """Pay what a process's first Inductor compile pays whatever the code, once, for every child.

    On a CPU most of a first compile is this: Inductor checks which vector ISAs the compiler and
    machine support by building and loading a test library per ISA (each load a Python process of
    its own) and runs the C++ toolchain for the first time; measured, 8.7 of a 10.5 s first compile
    of the demo's classifier. The results are kept in the process's memory, so a child inherits
    them. Kept fork-safe: one thread (no OpenMP team, no compile thread pool; both restored to
    decide afresh in the child) and a cache folder of the servers' own (``WARMUP_CACHE``); anything
    that goes wrong leaves the children to pay it themselves, as before.

    The folder is kept between servers: the ISA test libraries and the compiled kernel in it are
    keyed by compiler, flags and code, so the next server's warm-up loads them instead of building
    them (measured on the CPU: 2.2 s instead of 16.7 s, every server after the machine's first).
    No probe writes it: a sandboxed child has a /tmp of its own, and the folder holds nothing a
    child's compile reads (its kernels go to its side's cache)."""

    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    threads, compile_threads = torch.get_num_threads(), inductor_config.compile_threads
    old_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(default_cache_dir(), WARMUP_CACHE)
        torch.set_num_threads(1)
        inductor_config.compile_threads = 1
        compiled = torch.compile(lambda x: torch.relu(x @ x + 1.0), backend="inductor")
        compiled(torch.ones(8, 8))
    except Exception as err:
        print(f"perfcheck fork server: no first compile ({type(err).__name__}: {err})", file=sys.stderr)
    finally:
        torch._dynamo.reset()
        inductor_config.compile_threads = compile_threads
        torch.set_num_threads(threads)
        if old_cache is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old_cache


# The servers' first compiles' folder, beside torch's default cache (``first_compile``).
WARMUP_CACHE = "perfcheck-fork-server-warmup"


CUDA_ERROR_NOT_INITIALIZED = 3


NVML_MAX_RELEASES = 64


def release_nvml() -> None:
    """Shut NVML down where counting devices through it left it initialized (torch initializes it
    once per count and never shuts it down): a child closes every descriptor it inherits, NVML's
    on the GPU's device files among them, and an NVML that believes itself initialized over
    closed (or reused) descriptors answers a child's next device count wrongly; the H200's
    forked Llama probes failed with 'Invalid device id'. Shut down, a child's NVML starts afresh.
    ``nvmlShutdown`` undoes one ``nvmlInit`` and fails once none is left."""
    try:
        if "libnvidia-ml.so" not in Path("/proc/self/maps").read_text():
            return
        nvml = ctypes.CDLL("libnvidia-ml.so.1")  # the library already loaded: no second copy
        for _ in range(NVML_MAX_RELEASES):
            if nvml.nvmlShutdown() != 0:
                break
    except (OSError, AttributeError):
        return


def cuda_driver_initialized() -> bool:
    """Whether CUDA's driver was initialized (``cuInit``) in this process: a child forked after that
    cannot use CUDA. Loaded is not initialized: some images load libcuda at interpreter start (a
    ``.pth`` file of numba's does) and never call into it; a driver call made before ``cuInit``
    answers CUDA_ERROR_NOT_INITIALIZED and initializes nothing. Unsure is initialized."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return True
    if "libcuda.so" not in maps:
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")  # the library already loaded: no second copy
        context = ctypes.c_void_p()
        return bool(driver.cuCtxGetCurrent(ctypes.byref(context)) != CUDA_ERROR_NOT_INITIALIZED)
    except (OSError, AttributeError):
        return True


# Beside torch's own folder of precompiled headers (``default_cache_dir()/precompiled_headers``),
# never that folder itself: see ``headers_of_the_server``.
SERVER_HEADERS = "perfcheck-fork-server-headers"


def header_folders(codecache: Any, folder: str) -> None:
    setattr(codecache, "_HEADER_DIR", folder)  # noqa: B010 (torch's private module globals)
    setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(folder, "locks"))  # noqa: B010


def headers_of_the_server() -> None:
    """The server's C++ precompiled headers (built by its first compile, used by every child) go
    to a folder of perfcheck's beside torch's default one. A sandboxed child sees the server's
    folder read-only at its path (its compiles name the headers in it), so were it torch's
    default folder, every fresh process of that side (torchrun's ranks, a compile-latency run)
    would find its default folder read-only and fail on the first lock Inductor takes there
    (issue 40: every compiled DDP variant failed on both sides). Kept across reviews, as torch
    keeps its own: a header is keyed by its compiler, flags and preprocessed content."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    header_folders(codecache, os.path.join(default_cache_dir(), SERVER_HEADERS))


def server_headers() -> str | None:
    """The folder of the C++ precompiled headers Inductor built or found for the server's first
    compile, where the server has one: a child keeps their paths in memory (``_precompile_header``
    is cached for the life of a process), so a sandboxed child sees that folder, read-only."""
    codecache = sys.modules.get("torch._inductor.codecache")
    folder = getattr(codecache, "_HEADER_DIR", None)
    return folder if isinstance(folder, str) and os.path.isdir(folder) else None


def own_headers() -> None:
    """In a sandboxed child: a header of other flags than the server's is built where a fresh
    process of its side builds one, torch's default folder in the side's own /tmp, not in the
    server's folder, which the child sees read-only. A header is code compiled into every kernel,
    so one side's processes never write a header the other side reads."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    header_folders(codecache, os.path.join(default_cache_dir(), "precompiled_headers"))
