"""What the ONNX LSTM benchmarks share: the model, its inputs, the unrolled-importer worker, block timing.

The model is one bidirectional ONNX LSTM node (batch 8, hidden 128, input 64, float32). Its
"unrolled" contender is the importer as it was before the recurrence became one tk.scan per
direction (commit UNROLLED_COMMIT, one cell per time step): it runs in a worker process on a
`git worktree` of that commit (`unrolled_checkout`) and times blocks of calls on request (`Remote`),
so its blocks alternate with this checkout's in one run (`alternating`).

    python benchmarks/dynamic/lstm.py --worker MODEL.onnx   (started by Remote; not run by hand)
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterator

import numpy as np

BATCH, HIDDEN, INPUT = 8, 128, 64
UNROLLED_COMMIT = "2352ee2"  # the last commit whose ONNX importer unrolled RNN/GRU/LSTM over time
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
if __name__ == "__main__":  # the worker imports the baseline checkout's tensorkiln, never this one's
    sys.path.insert(0, os.environ["TK_BASELINE_TREE"])


def lstm_model(seq):
    """The bidirectional LSTM model (an onnx ModelProto); `seq`, X's first dimension, is a dim_param
    name or a number. The weights are the same for every `seq`."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((2, 4 * HIDDEN, INPUT)) * 0.1,
               "R": rng.standard_normal((2, 4 * HIDDEN, HIDDEN)) * 0.1,
               "B": rng.standard_normal((2, 8 * HIDDEN)) * 0.1}
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN,
                            direction="bidirectional")
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, (seq, BATCH, INPUT))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def feed(seq: int) -> np.ndarray:
    """X of `seq` steps (seeded by the length: the same input on every run)."""
    return np.random.default_rng(seq).standard_normal((seq, BATCH, INPUT)).astype(np.float32)


def gate_flops(seq: int) -> float:
    """The gate matmuls' flops: 2 * 4H * (I + H) per batch entry, step and direction."""
    return 2.0 * seq * BATCH * 2 * 4 * HIDDEN * (INPUT + HIDDEN)


# ---- the worker: one model loaded by the unrolling checkout, timing blocks on request --------------
def worker(model: str) -> None:
    """Load `model` with the tensorkiln on sys.path (the baseline checkout), report the compile time,
    then answer `run N` lines with the seconds N calls took (`quit` ends)."""
    import tensorkiln as tk
    assert os.path.dirname(os.path.dirname(os.path.abspath(tk.__file__))) == os.path.abspath(
        os.environ["TK_BASELINE_TREE"]), f"the worker imported {tk.__file__}"
    x = np.load(model + ".x.npy")
    start = time.perf_counter()
    module = tk.onnx.load(model)
    outputs = module(X=x)
    np.save(model + ".out.npy", np.asarray(outputs[0]))  # Y, for the caller to compare
    print(json.dumps({"compile_seconds": time.perf_counter() - start}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        calls = int(line.split()[1])
        start = time.perf_counter()
        for _ in range(calls):
            module(X=x)
        print(time.perf_counter() - start, flush=True)


class Remote:
    """A worker process running the model `seq` steps long with another checkout's tensorkiln
    (its own compile cache, so its compile is cold). `.y` is its output Y."""

    def __init__(self, tree: str, seq: int, scratch: str):
        from onnx import save
        model = os.path.join(scratch, f"lstm{seq}.onnx")
        save(lstm_model(seq), model)
        np.save(model + ".x.npy", feed(seq))
        env = dict(os.environ, PYTHONPATH=tree, TK_BASELINE_TREE=tree, TENSORKILN_VERBOSE="0",
                   TENSORKILN_CACHE=os.path.join(scratch, f"cache-unrolled-{seq}"))
        env.setdefault("OMP_WAIT_POLICY", "passive")
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", model],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        self.compile_seconds = json.loads(self.process.stdout.readline())["compile_seconds"]
        self.y = np.load(model + ".out.npy")

    def run(self, calls: int) -> float:
        """Seconds `calls` calls took in the worker."""
        self.process.stdin.write(f"run {calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait()


@contextlib.contextmanager
def unrolled_checkout(path: str | None = None) -> Iterator[str]:
    """A checkout of the unrolling importer: `path` if given, else a git worktree of UNROLLED_COMMIT
    made for the run and removed after it."""
    if path is not None:
        yield path
        return
    tree = os.path.join(tempfile.mkdtemp(prefix="tk-lstm-unrolled-"), "tree")
    subprocess.check_call(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree, UNROLLED_COMMIT])
    try:
        yield tree
    finally:
        subprocess.call(["git", "-C", ROOT, "worktree", "remove", "--force", tree])


def calls_of(fn: Callable[[], object]) -> Callable[[int], float]:
    """A block runner for `alternating`: the seconds `calls` calls of `fn` take."""
    def block(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - start
    return block


def alternating(blocks: dict[str, Callable[[int], float]], pairs: int,
                min_block_seconds: float = 0.4) -> dict[str, list[float]]:
    """Seconds per call of each contender in `pairs` rounds of one block each, taken in turns (order
    reversed every round), as tools/timing.alternating_blocks, for contenders that time their own
    blocks (`blocks[name](calls)` -> seconds), such as a worker process."""
    times: dict[str, list[float]] = {name: [] for name in blocks}
    order = list(blocks)
    for index in range(pairs):
        for name in (order if index % 2 == 0 else order[::-1]):
            time.sleep(0.2)
            first = max(blocks[name](1), 1e-6)
            calls = max(1, int(np.ceil(min_block_seconds / first)))
            times[name].append(blocks[name](calls) / calls)
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over the rounds of a's block time over b's (> 1: a is slower)."""
    return float(np.median([x / y for x, y in zip(times[a], times[b])]))


if __name__ == "__main__" and "--worker" in sys.argv:
    worker(sys.argv[sys.argv.index("--worker") + 1])
