"""Sequence flags (runtime/shared_flags.c) in one process: a wait returns once every other flag has
reached the call, names the first late one after its timeout, and sees a publish from another thread."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tensorkiln.runtime import shared_flags
from tensorkiln.runtime.shared_flags import LINE_BYTES, Flags

pytestmark = pytest.mark.skipif(not shared_flags.available(), reason="no C compiler for the flags")


def lines(count: int) -> tuple[np.ndarray, list[int]]:
    """`count` int64 flags, each at the start of its own cache line, and their addresses."""
    memory = np.zeros((count + 1) * LINE_BYTES // 8, np.int64)
    first = -memory.ctypes.data % LINE_BYTES // 8
    addresses = [memory.ctypes.data + 8 * first + LINE_BYTES * r for r in range(count)]
    return memory, addresses


def test_a_wait_names_the_first_rank_short_of_the_call_after_its_timeout():
    memory, addresses = lines(3)
    flags = Flags(addresses, rank=0, timeout_seconds=0.05)
    flags.publish(4)
    assert shared_flags.read(addresses[0]) == 4
    assert flags.wait(1) == 1  # nobody else has published
    Flags(addresses, rank=1, timeout_seconds=0.05).publish(1)
    assert flags.wait(1) == 2
    Flags(addresses, rank=2, timeout_seconds=0.05).publish(3)
    assert flags.wait(1) == -1 and flags.wait(2) == 1  # rank 1 reached call 1, not 2
    assert memory.sum() == 4 + 1 + 3  # each publish wrote its own line only


def test_a_wait_sees_a_publish_from_another_thread():
    _, addresses = lines(2)
    waiter, other = Flags(addresses, 0, 30.0), Flags(addresses, 1, 30.0)

    def later():
        time.sleep(0.05)
        other.publish(7)

    thread = threading.Thread(target=later)
    thread.start()
    assert waiter.wait(7) == -1  # the foreign call releases the GIL, so the thread runs meanwhile
    thread.join()


def test_flags_must_start_cache_lines():
    _, addresses = lines(2)
    with pytest.raises(ValueError, match="cache lines"):
        Flags([addresses[0] + 8, addresses[1]], 0, 1.0)


def test_the_wait_policy_is_read_from_the_mpi_settings_the_launcher_exports():
    assert shared_flags.yields_when_waiting({"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"})
    assert shared_flags.yields_when_waiting({"OMPI_MCA_mpi_yield_when_idle": "1"})
    assert not shared_flags.yields_when_waiting({"MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"})
    assert not shared_flags.yields_when_waiting({})
