"""`tensorkiln bench`'s models (float32, batch 1) per call in two tensorkiln checkouts, in alternating
blocks: what a change to the compiler did to them, measured in one run (beside bert_checkouts.py, whose
check of the same change on BERT it completes).

    OMP_WAIT_POLICY=passive python benchmarks/dynamic/models_checkouts.py --checkouts base=PATH,new=PATH
        [--models resnet18,mobilenetv2] [--rounds 11]

Each checkout compiles each model (`tensorkiln.tools.bench.build`, `from_torch`) in its own process;
the parent asks each in turn for a block of about 0.5 s of calls (the order reversed every round) and
prints the medians and the median of the per-round ratios to the first checkout. OMP_NUM_THREADS
sets the threads. On a machine shared with other jobs read the ratios, not the times.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkout_turns import compare_in_turns, start_children  # noqa: E402

BLOCK_SECONDS = 0.5


def serve(models: list[str]) -> None:
    """The child: compile `models`, then answer "model calls" lines with the seconds per call."""
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build
    runs = {}
    for name in models:
        module, inputs = build(name, 1)
        compiled, arrays = from_torch(module, inputs), [x.numpy() for x in inputs]
        runs[name] = (lambda c, a: lambda: c(*a))(compiled, arrays)
        runs[name]()
    print("ready", flush=True)
    for line in sys.stdin:
        name, calls = line.split()
        start = time.perf_counter()
        for _ in range(int(calls)):
            runs[name]()
        print((time.perf_counter() - start) / int(calls), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkouts", help="name=path,name=path (the first is the base)")
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    models = args.models.split(",")
    if args.serve:
        serve(models)
        return
    if not args.checkouts:
        parser.error("--checkouts is required: name=path,name=path")
    children = start_children(args.checkouts, __file__, ["--models", args.models])
    compare_in_turns(children, models, args.rounds, BLOCK_SECONDS, label="{key:<12}")

if __name__ == "__main__":
    main()
