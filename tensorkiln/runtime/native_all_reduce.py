"""Short all-reduces through shared memory without entering Python (native_all_reduce.c).

A tensor-parallel decode makes 27 all-reduces of one token's features per token, each on the critical
path; through Python's hook each start and each wait is a ctypes callback that parses nothing (the
channel is cached) but still takes the interpreter, a handler lookup, two ctypes calls into the flags and
a numpy reduction: tens of microseconds a call on a loaded 2-core machine, where the flags alone take a
few. So every library's runtime hook is `tk_native_dispatch`, which looks the call's description up by its
address (a string literal of the library: one address per call site) and runs the registered
shared-memory all-reduces itself; every other call goes on to Python's hook (hooks.py).

A call site is registered when its first call went through Python's shared path (collective_hook.py):
a SharedAllReduce of one phase (at most `SharedAllReduce.one_phase_bytes`) of float32, float64, int32 or
int64, and only while the ranks do not check agreement per call (`dist.init(check_agreement=False)`: the
check is a round of MPI messages in Python). The C path uses the same segment, flags and call counter
as the Python one, so the two may take turns; `set_enabled(False)`, or Channel.share_memory_without_progress = False, sends
every call to Python again. A rank that waits past the timeout fails the call with the
same DistributedError, naming itself and the rank it waited for.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import CompileError, DistributedError
from .c_compiler import compile_c
from .shared_flags import _SOURCE as FLAGS_SOURCE

if TYPE_CHECKING:
    from .shared_all_reduce import SharedAllReduce

_SOURCE = Path(__file__).with_name("native_all_reduce.c")
DTYPES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3}
REDUCTIONS = {"sum": 0, "mean": 1, "max": 2, "min": 3}
START, WAIT = 0, 1
# the runtime hook's type (hooks.py): int hook(const char *what, void *out, const void *in)
HOOK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
FAILURE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int, ctypes.c_int64)


class Site(ctypes.Structure):
    """native_all_reduce.c's tk_site: one shared all-reduce, every pointer into memory Python keeps."""

    _fields_ = [("calls", ctypes.c_void_p), ("arrived", ctypes.c_void_p), ("done", ctypes.c_void_p),
                ("slots", ctypes.c_void_p), ("count", ctypes.c_int64), ("polls", ctypes.c_int64),
                ("timeout", ctypes.c_double), ("size", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("reduction", ctypes.c_int32), ("site", ctypes.c_int64)]


# registered sites with their all-reduce and the arrays their pointers address, kept alive: C holds them
_sites: list[tuple[Site, "SharedAllReduce", dict[str, np.ndarray]]] = []
_registered: dict[int, bytes] = {}  # description address -> its text (C compares it at every call)


_keep_failure: list[Callable[[BaseException], None]] = []  # hooks.keep_failure, given by hook()


def _failed(site: int, late: int, call: int) -> None:
    """(Called from C) a rank waited past the timeout: keep the error for the module to raise."""
    shared = _sites[site][1]
    _keep_failure[0](DistributedError(
        f"{shared.where or f'rank {shared.rank}'}: all_reduce through shared memory: rank {late} of the group "
        f"did not reach call {call} within {shared.wait_timeout_seconds:g} s"))


_FAILURE = FAILURE_TYPE(_failed)  # kept alive for the life of the process


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL | None:
    """The native hook, built once into the compile cache (None without a C compiler: Python's hook only)."""
    try:
        lib = ctypes.CDLL(compile_c(FLAGS_SOURCE.read_text() + "\n" + _SOURCE.read_text()).path)
    except (CompileError, OSError):
        return None
    lib.tk_native_set_fallback.argtypes = [HOOK_TYPE, FAILURE_TYPE]
    lib.tk_native_set_fallback.restype = None
    lib.tk_native_set_enabled.argtypes = [ctypes.c_int]
    lib.tk_native_set_enabled.restype = None
    lib.tk_native_register.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    lib.tk_native_register.restype = ctypes.c_int
    return lib


def hook(fallback: HOOK_TYPE, keep_failure: Callable[[BaseException], None]) -> HOOK_TYPE | None:
    """The hook every library gets (hooks.install): the native dispatcher, which hands the calls it does
    not run to `fallback` and a failure of its own to `keep_failure`; None where it cannot be built."""
    lib = library()
    if lib is None:
        return None
    if not _keep_failure:
        _keep_failure.append(keep_failure)
        lib.tk_native_set_fallback(fallback, _FAILURE)
    return ctypes.cast(lib.tk_native_dispatch, HOOK_TYPE)


_switches = {"enabled": True, "sharing": True}


def set_enabled(on: bool) -> None:
    """Whether registered sites run in C (else every call goes to Python, registered or not)."""
    _switch("enabled", on)


def set_sharing(on: bool) -> None:
    """(Channel.share_memory_without_progress) whether all-reduces go through shared memory at all:
    where not, registered sites go to Python, which takes MPI's path."""
    _switch("sharing", on)


def _switch(name: str, on: bool) -> None:
    _switches[name] = bool(on)
    lib = library()
    if lib is not None:
        lib.tk_native_set_enabled(int(all(_switches.values())))


def serves(shared: "SharedAllReduce") -> bool:
    """Whether C can run this shared all-reduce: one phase, a dtype and reduction it knows."""
    return shared.one_phase and shared.dtype.name in DTYPES and shared.reduction in REDUCTIONS


def register(address: int, shared: "SharedAllReduce", phase: int) -> bool:
    """Route the calls of the description at `address` to C as `shared`'s start or wait, while the text
    there stays the same (a released library's address may come back with another); False where they
    stay with Python (no native hook, a site C cannot run, a full table)."""
    lib = library()
    if lib is None or not address or not serves(shared):
        return False
    text = ctypes.string_at(address)
    if _registered.get(address) == text:
        return True
    site = _site_of(shared)
    if not lib.tk_native_register(address, text, ctypes.addressof(site), phase):
        return False
    _registered[address] = text  # kept alive: C reads it at every call
    return True


def _site_of(shared: "SharedAllReduce") -> Site:
    for site, owner, _ in _sites:
        if owner is shared:
            return site
    arrays = shared.native_arrays()
    site = Site(calls=arrays["calls"].ctypes.data, arrived=arrays["arrived"].ctypes.data,
                done=arrays["done"].ctypes.data, slots=arrays["slots"].ctypes.data, count=shared.count,
                polls=shared.arrived.polls, timeout=shared.wait_timeout_seconds, size=shared.size,
                rank=shared.rank, dtype=DTYPES[shared.dtype.name], reduction=REDUCTIONS[shared.reduction],
                site=len(_sites))
    _sites.append((site, shared, arrays))
    return site

