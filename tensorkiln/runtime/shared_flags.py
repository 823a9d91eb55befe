"""Sequence flags in shared memory (shared_flags.c): how ranks of one node wait for each other without MPI.

A collective through memory the ranks share needs each rank to know when the
others have written their operands, or finished reading its own. An MPI
barrier answers that with a round of messages through the library's queues
(microseconds when the ranks spin, a scheduler sleep when they yield); here a
rank stores the number of the call it has reached into its own cache line and
reads the others' lines until they have reached it too. The stores and loads
are C11-style release and acquire atomics, so the operands written before a
flag are visible to a rank that has seen the flag, on any processor.

How long a rank polls before it gives its core away follows the launch's wait
policy (distributed/wait_policy.py sets MPICH's or Open MPI's variables; they
are read here): spinning ranks yield one poll in 1024 (sched_yield, which
returns at once when nothing else wants the core); yielding ranks sleep before
every poll after the first 100, as MPICH's heavy yield does, since on cores
shared with other work a rank that only calls sched_yield stays in the run
queue and takes time from the rank it waits for.
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import numpy as np

from ..errors import CompileError
from .c_compiler import compile_c

LINE_BYTES = 64  # one flag per cache line
_SOURCE = Path(__file__).with_name("shared_flags.c")
SPIN_POLLS = 1 << 62  # polls before sleeping at every poll, when ranks spin: never
YIELD_POLLS = 100  # as MPICH's MPIR_CVAR_POLLS_BEFORE_YIELD under the yield policy


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    """The compiled flags (built once into the compile cache; CompileError without a C compiler)."""
    library = ctypes.CDLL(compile_c(_SOURCE.read_text()).path)
    library.tk_flag_publish.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    library.tk_flag_publish.restype = None
    library.tk_flag_wait.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_double]
    library.tk_flag_wait.restype = ctypes.c_int
    return library


def available() -> bool:
    """Whether the flags can be built here (a C compiler); without them shared memory is not used."""
    try:
        _library()
        return True
    except (CompileError, OSError):
        return False


def yields_when_waiting(environ: dict[str, str] | None = None) -> bool:
    """Whether this launch's ranks give their core away while they wait (the yield policy)."""
    environ = os.environ if environ is None else environ
    return (environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD", "").strip() == "1"
            or environ.get("OMPI_MCA_mpi_yield_when_idle", "").strip() == "1")


class Flags:
    """One flag per rank, rank r's an int64 at `addresses[r]`, each on a cache line of its own."""

    def __init__(self, addresses: list[int], rank: int, timeout_seconds: float):
        if any(a % LINE_BYTES for a in addresses):
            raise ValueError("flags must start cache lines: " + ", ".join(f"{a:#x}" for a in addresses))
        self.library = _library()
        self.addresses = list(addresses)
        self.pointers = (ctypes.c_void_p * len(addresses))(*addresses)  # kept: C reads it at every wait
        self.size, self.rank = len(addresses), rank
        self.mine = addresses[rank]
        self.timeout = timeout_seconds
        self.polls = YIELD_POLLS if yields_when_waiting() else SPIN_POLLS

    def publish(self, value: int) -> None:
        """Tell the other ranks that this rank has reached `value`."""
        self.library.tk_flag_publish(self.mine, value)

    def wait(self, value: int) -> int:
        """Wait until every other rank has reached `value`: -1, or the first rank that had not when the
        timeout passed."""
        return self.library.tk_flag_wait(self.pointers, self.size, self.rank, value, self.polls, self.timeout)


def read(address: int) -> int:
    """A flag's value now (for messages and tests)."""
    return int(np.frombuffer((ctypes.c_int64 * 1).from_address(address), np.int64)[0])
