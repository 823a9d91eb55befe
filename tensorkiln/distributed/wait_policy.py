"""How a rank waits for a message: spin on the shared-memory queue, or give up its core between polls.

A rank blocked in MPI polls its queues. Spinning answers a message in about
a microsecond, but holds a core; when there are more ranks (times their
OpenMP threads) than cores, the spinning rank may hold the very core its
peer needs to send, and every wait then lasts a scheduler time slice. MPICH
can instead sleep between polls (MPIR_CVAR_ENABLE_HEAVY_YIELD: a nanosleep
after MPIR_CVAR_POLLS_BEFORE_YIELD polls), which frees the core but makes
every message wait out the sleep: measured here, a ping-pong's one-way time
went from 1-8 us spinning to 100-180 us sleeping (2 ranks on 2 cores,
`python benchmarks/distributed.py --ping-pong-only`). Other work counts as
well: on this machine shared with other jobs (10-15 threads ready to run on
its 2 cores), the spinning ranks' ping-pong took 925 us one way and the
yielding ranks' 183 us. So `auto` spins when ranks x threads fit in the cores
this process may use less the threads of other work ready to run at launch
(Linux's count in /proc/loadavg, the median of a few samples), and yields
otherwise; `tensorkiln launch --wait spin|yield` overrides it, and an MPI
setting already in the environment wins over both.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

from ..runtime.communicator import progresses_in_background  # noqa: F401  (the runtime's channels ask it too)

WAIT_POLICIES = ("auto", "spin", "yield")

# The MPI settings of each policy. Spinning keeps MPICH's light yield (a sched_yield every 1000 polls,
# which returns at once when no other thread wants the core); yielding sleeps after 100 polls.
SPIN_WHEN_WAITING = {
    "mpich": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"},
    "openmpi": {"OMPI_MCA_mpi_yield_when_idle": "0"},
}
YIELD_WHEN_WAITING = {
    "mpich": {"MPIR_CVAR_POLLS_BEFORE_YIELD": "100", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
    "openmpi": {"OMPI_MCA_mpi_yield_when_idle": "1"},
}


@dataclass(frozen=True)
class WaitChoice:
    """The policy a launch uses ('spin' or 'yield') and the reason, for the launcher's message."""

    policy: str
    reason: str

    def describe(self) -> str:
        verb = "spin" if self.policy == "spin" else "yield their core (sleep between polls)"
        return f"{verb}: {self.reason}"


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_threads(samples: int = 5, interval: float = 0.01) -> int:
    """Threads of other work ready to run now: the median over `samples` of Linux's count of runnable
    threads (/proc/loadavg's fourth field), less the one reading it; 0 where there is no such count."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, IndexError, ValueError):
            return 0
        if i + 1 < samples:
            time.sleep(interval)
    return max(0, int(statistics.median(counts)))


def choose_wait_policy(ranks: int, threads: int, requested: str = "auto", cores: int | None = None,
                       busy: int | None = None) -> WaitChoice:
    """'spin' when ranks x threads <= cores - busy (each thread has a core no other work wants), else
    'yield'; a requested policy wins. cores, busy: default usable_cores() and busy_threads()."""
    if requested not in WAIT_POLICIES:
        raise ValueError(f"unknown wait policy {requested!r}: one of {', '.join(WAIT_POLICIES)}")
    if requested != "auto":
        return WaitChoice(requested, "as requested (--wait)")
    cores = usable_cores() if cores is None else cores
    busy = busy_threads() if busy is None else busy
    demand, free = ranks * threads, cores - busy
    fits = "<=" if demand <= free else ">"
    others = f" - {busy} busy with other work" if busy else ""
    return WaitChoice("spin" if demand <= free else "yield",
                      f"{ranks} rank(s) x {threads} thread(s) {fits} {cores} core(s){others}")


def wait_environment(policy: str, flavour: str) -> dict[str, str]:
    """The environment variables that make `flavour`'s ranks ('mpich' or 'openmpi') wait by `policy`."""
    table = SPIN_WHEN_WAITING if policy == "spin" else YIELD_WHEN_WAITING
    return dict(table[flavour])
