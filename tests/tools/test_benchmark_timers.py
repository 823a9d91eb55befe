"""The timers of the benchmarks: functions in turns, and the wait for idle worker threads between blocks."""
import threading
import time

from tensorkiln.tools.timing import IDLE_POLL_SECONDS, IDLE_WAIT_LIMIT_SECONDS, alternating_blocks, \
    interleaved_medians, wait_until_idle


class FakeClocks:
    """A wall clock moved by `sleep`, and a CPU clock that gains `busy_shares[i]` of the time slept during poll i."""

    def __init__(self, busy_shares):
        self.wall, self.cpu, self.polls, self.busy_shares = 0.0, 0.0, 0, list(busy_shares)

    def sleep(self, seconds):
        share = self.busy_shares[self.polls] if self.polls < len(self.busy_shares) else self.busy_shares[-1]
        if seconds == IDLE_POLL_SECONDS:
            self.polls += 1
        self.wall += seconds
        self.cpu += share * seconds


def test_the_wait_lasts_while_the_process_spins_and_ends_at_the_first_idle_poll():
    clocks = FakeClocks([1.0, 1.0, 0.9, 0.5, 0.01, 1.0])
    waited = wait_until_idle(0.05, cpu_clock=lambda: clocks.cpu, wall_clock=lambda: clocks.wall,
                             sleep=clocks.sleep)
    assert clocks.polls == 5  # four busy polls, then an idle one
    assert abs(waited - (0.05 + 5 * IDLE_POLL_SECONDS)) < 1e-9


def test_a_pool_that_never_sleeps_ends_the_wait_at_its_limit():
    clocks = FakeClocks([1.0])
    waited = wait_until_idle(0.0, limit_seconds=0.2, cpu_clock=lambda: clocks.cpu,
                             wall_clock=lambda: clocks.wall, sleep=clocks.sleep)
    assert 0.2 <= waited < 0.2 + 2 * IDLE_POLL_SECONDS


def test_the_wait_outlasts_a_spinning_thread_of_this_process():
    """A thread that spins for 0.2 s (as a BLAS pool does after its call) holds the wait until it stops."""
    stop = time.perf_counter() + 0.2

    def spin():
        while time.perf_counter() < stop:
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        waited = wait_until_idle(0.0)
    finally:
        spinner.join()
    assert 0.1 <= waited < IDLE_WAIT_LIMIT_SECONDS


def test_interleaved_medians_take_the_functions_in_turns():
    """Every round times a block of each function in turn; blocks grow until they last min_block_seconds."""
    order = []
    runs = {"slow": lambda: (order.append("slow"), time.sleep(0.01)),
            "fast": lambda: order.append("fast")}
    medians = interleaved_medians(runs, repeat=6, rounds=3, min_block_seconds=0.01, pause_seconds=0.0,
                                  max_block_calls=20)
    assert medians["slow"] >= 0.01 > medians["fast"]
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches == 2 * 3 - 1  # slow, fast, slow, fast, slow, fast
    assert order.count("slow") == 3 * (1 + 2)  # an untimed call, then ceil(6 / 3) calls (they last 0.01 s)
    assert order.count("fast") == 3 * (1 + 20)  # microseconds each: the block is capped at 20 calls


def test_alternating_blocks_pair_the_functions_and_reverse_their_order():
    """One block of each function per round, the order reversed every round, one figure per block."""
    order = []
    runs = {"slow": lambda: (order.append("slow"), time.sleep(0.005)), "fast": lambda: order.append("fast")}
    blocks = alternating_blocks(runs, pairs=4, min_block_seconds=0.004, pause_seconds=0.0)
    assert [len(v) for v in blocks.values()] == [4, 4]
    assert all(s > f for s, f in zip(blocks["slow"], blocks["fast"]))
    runs_of = [name for k, name in enumerate(order) if k == 0 or order[k - 1] != name]
    assert runs_of == ["slow", "fast", "slow", "fast", "slow"]  # slow, fast | fast, slow | slow, fast | fast, slow
    assert order.count("slow") == 4 * 2  # an untimed call, then one that lasts the block's 0.004 s
