"""The native runtime hook (runtime/native_all_reduce.c) in one process: a registered description runs
in C, any other call (or a registered address whose text has changed, as when a released library's
address comes back with another description) goes on to Python's hook. A world of one rank: the flags
wait for nobody, and the reduction of one slot is a copy."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from tensorkiln.runtime import hooks, native_all_reduce

pytestmark = pytest.mark.skipif(native_all_reduce.library() is None, reason="no C compiler builds the native hook")


class OneRank:
    """What native_all_reduce reads of a SharedAllReduce, for a group of one rank over `count` float32."""

    def __init__(self, count: int):
        self.count, self.size, self.rank, self.where = count, 1, 0, "rank 0"
        self.one_phase, self.dtype, self.reduction = True, np.dtype(np.float32), "sum"
        self.wait_timeout_seconds = 1.0
        self.slot = np.zeros(count, np.float32)
        self.flags = np.zeros(16, np.int64)  # arrived at [0], done at [8]: each on its own line
        self.arrived = SimpleNamespace(polls=100)
        self.calls = np.zeros(1, np.int64)

    def native_arrays(self) -> dict[str, np.ndarray]:
        return {"calls": self.calls, "arrived": np.array([self.flags.ctypes.data], np.uint64),
                "done": np.array([self.flags.ctypes.data + 64], np.uint64),
                "slots": np.array([self.slot.ctypes.data], np.uint64)}


def call(hook, text_buffer, out: np.ndarray, operand: np.ndarray) -> int:
    return hook(ctypes.addressof(text_buffer), out.ctypes.data, operand.ctypes.data)


def test_registered_calls_run_in_c_and_changed_descriptions_go_to_python():
    hook = native_all_reduce.hook(hooks.PYTHON_HOOK, hooks.keep_failure)
    seen = []
    hooks.register_handler("native_test", lambda what, out, in_: seen.append(what))
    shared = OneRank(5)
    start = ctypes.create_string_buffer(b"native_test seq=1 phase=start")
    wait = ctypes.create_string_buffer(b"native_test seq=1 phase=wait")
    assert native_all_reduce.register(ctypes.addressof(start), shared, native_all_reduce.START)
    assert native_all_reduce.register(ctypes.addressof(wait), shared, native_all_reduce.WAIT)
    operand, out = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    for n in range(1, 4):
        assert call(hook, start, out, operand * n) == 0 and call(hook, wait, out, operand) == 0
        np.testing.assert_array_equal(out, operand * n)  # C copied the operand in and reduced one slot out
        assert int(shared.calls[0]) == n and shared.flags[0] == n and shared.flags[8] == n
    assert seen == []  # nothing went to Python
    # the same address, another description: Python's hook gets the call
    ctypes.memmove(wait, b"native_test seq=2 phase=wait\0", 29)
    assert call(hook, wait, out, operand) == 0
    assert seen == ["native_test seq=2 phase=wait"] and int(shared.calls[0]) == 3
    # switched off: even a registered call goes to Python
    native_all_reduce.set_enabled(False)
    try:
        assert call(hook, start, out, operand) == 0
        assert seen[-1] == "native_test seq=1 phase=start"
    finally:
        native_all_reduce.set_enabled(True)


def test_a_site_c_cannot_run_stays_with_python():
    two_phases = OneRank(3)
    two_phases.one_phase = False
    text = ctypes.create_string_buffer(b"native_test seq=3 phase=wait")
    assert not native_all_reduce.register(ctypes.addressof(text), two_phases, native_all_reduce.WAIT)
    odd = OneRank(3)
    odd.dtype = np.dtype(np.float16)
    assert not native_all_reduce.register(ctypes.addressof(text), odd, native_all_reduce.WAIT)
