"""BERT-base ONNX (symbolic batch and sequence axes) per call in two tensorkiln checkouts and ONNX Runtime,
in alternating blocks: what a change to the compiler did, measured in one run.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic/bert_checkouts.py --checkouts base=PATH,new=PATH
        [--samples 16,128,384] [--rounds 7] [--ort] [--json FILE]

Each checkout runs in its own process (a checkout is a tree holding `tensorkiln/`, e.g. a
`git worktree` of main and the working tree) on the same exported file
(benchmarks/dynamic/bert_onnx.export_bert) and the same inputs; the parent asks each in turn for a
block of calls at one length (the order reversed every round, a short pause before each block) and
prints the medians and the medians of the per-round ratios to the first checkout. --ort adds ONNX
Runtime on the same file (benchmarks/dynamic/ort_peer: IOBinding, 2 intra-op threads). Processes
that wait for their turn sleep (OMP_WAIT_POLICY=passive), so one block runs at a time. On a machine
shared with other jobs read the ratios, not the times.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds benchmarks/
CALLS_PER_BLOCK_TOKENS = 160  # a block is about this many tokens' worth of calls (at least one call)


def serve(kind: str, path: str) -> None:
    """The child: load `path` with tensorkiln (or ONNX Runtime), then answer "length calls" lines
    with the seconds per call of a block of that many calls."""
    from benchmarks.dynamic.bert_onnx import inputs
    if kind == "tensorkiln":
        import tensorkiln as tk
        model = tk.onnx.load(path)

        def runner(n: int):
            ids, mask = inputs(1, n)
            return lambda: model(ids, mask)
    else:
        from benchmarks.dynamic.ort_peer import bound_runner, ort_session
        session = ort_session(path)

        def runner(n: int):
            ids, mask = inputs(1, n)
            return bound_runner(session, {"input_ids": ids, "attention_mask": mask})[0]
    runs: dict[int, object] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        n, calls = map(int, line.split())
        if n not in runs:
            runs[n] = runner(n)
            runs[n]()  # compiles at a new size class; warms the caches
        start = time.perf_counter()
        for _ in range(calls):
            runs[n]()
        print((time.perf_counter() - start) / calls, flush=True)


def start(name: str, checkout: str, path: str) -> subprocess.Popen:
    """A serving child for `checkout` (its tensorkiln first on the path; benchmarks/ from here)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout, ROOT]))
    kind = "ort" if name == "ort" else "tensorkiln"
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", kind, path], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=checkout)
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{name} ({checkout}): the child did not start")
    return child


def ask(child: subprocess.Popen, n: int, calls: int) -> float:
    child.stdin.write(f"{n} {calls}\n")
    child.stdin.flush()
    return float(child.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkouts", help="name=path,name=path (the first is the base)")
    parser.add_argument("--samples", default="16,128,384")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ort", action="store_true", help="ONNX Runtime on the same file as well")
    parser.add_argument("--json")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if not args.checkouts:
        parser.error("--checkouts is required: name=path,name=path")
    sys.path.insert(0, ROOT)
    from benchmarks.common import machine_summary, print_table, write_json
    from benchmarks.dynamic.bert_onnx import export_bert
    print(machine_summary())
    path = export_bert(tempfile.mkdtemp(prefix="tk-bert-checkouts-"))
    checkouts = dict(spec.split("=", 1) for spec in args.checkouts.split(","))
    children = {name: start(name, os.path.abspath(tree), path) for name, tree in checkouts.items()}
    if args.ort:
        children["ort"] = start("ort", ROOT, path)
    names, base, rows, results = list(children), list(children)[0], [], {}
    try:
        for n in [int(s) for s in args.samples.split(",")]:
            calls = max(1, CALLS_PER_BLOCK_TOKENS // n)
            for child in children.values():
                ask(child, n, 1)
            times: dict[str, list[float]] = {name: [] for name in names}
            for round_index in range(args.rounds):
                for name in names if round_index % 2 == 0 else names[::-1]:
                    time.sleep(0.05)
                    times[name].append(ask(children[name], n, calls))
            ratios = {name: float(np.median([a / b for a, b in zip(times[name], times[base])])) for name in names}
            rows.append([str(n)] + [f"{np.median(times[name]) * 1e3:.2f}" for name in names]
                        + [f"{ratios[name]:.3f}" for name in names[1:]])
            results[str(n)] = {"seconds": {k: float(np.median(v)) for k, v in times.items()}, "over_base": ratios}
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait()
    print_table(["seq"] + [f"{name} ms" for name in names] + [f"{name} / {base}" for name in names[1:]], rows)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
