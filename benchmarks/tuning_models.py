"""Whole models tuned: ResNet-18 and BERT-base, tuned vs untuned end to end, all four timed in turns in one run.

    python benchmarks/tuning_models.py [--trials 64] [--seconds 420 540] [--models resnet18 bert]
        [--no-model-check] [--records FILE] [--json out.json]

Each model (zoo, batch 1; BERT-base at sequence 128; in inference: eval
mode without gradients, its weights constants of the program) is tuned as
`tensorkiln tune MODEL --trials N --seconds S` tunes it (tk.tune: the task scheduler
shares S seconds among its distinct kernel workloads), into one fresh
records file; unless --no-model-check, each workload's best candidates
alone are then timed inside the model and the model chooses
(tune/in_model.py: profile() of builds carrying one candidate per
workload, in turns with the untuned build), and the chosen records are
checked end to end (tune/model_check.py: kept only if the model with them
is faster in turns); their time comes out of S. The choice's table (per
candidate: in-model ms untuned and tuned, the ratio, which was chosen) is
the per-kernel before/after inside the whole model.

With `--records FILE` nothing is tuned: the models are timed with the
records of an earlier run (its fresh records file, whose path that run
prints), to time what it kept again in another process.

Then every model is compiled untuned and tuned (with the records kept), and
all the builds are timed in turns in this process
(tensorkiln.tools.timing.alternating_blocks: 2 x `--rounds` pairs of blocks
of calls of each build, the order reversed every pair), so the
tuned/untuned ratio of each model is measured in the same phases of a
shared machine: the table's speedup is the median over pairs of each
pair's untuned / tuned block (the ms columns are the medians of the
blocks). float32 throughout.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from tensorkiln.kernels.tuned import using_configs  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402
from tensorkiln.tools.tune_cli import same_program, zoo_model  # noqa: E402
from tensorkiln.tune import kernel_workloads, tune  # noqa: E402

from common import machine_summary, print_table, write_json  # noqa: E402

BUDGETS = {"resnet18": 420.0, "bert": 540.0}  # seconds of the whole tk.tune call (the search and the check)


def note(text: str) -> None:
    """A progress line on stderr with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def tune_model(name: str, trials: int, seconds: float, check: bool) -> dict:
    make, inputs = zoo_model(name, 1)
    with using_configs({}):
        untuned = make()
        untuned(*inputs)
    tasks = len(kernel_workloads(untuned, *inputs))
    note(f"{name}: {tasks} tasks, {seconds:.0f} s")
    start = time.monotonic()
    result = tune(untuned, *inputs, trials=trials, seconds=seconds, check_model=check, rebuild=make)
    tuning_seconds = time.monotonic() - start
    print(f"== {name}\n{result}", flush=True)
    return {"model": name, "make": make, "inputs": inputs, "tasks": tasks, "trials": result.trials,
            "tuning_seconds": tuning_seconds, "tuned_workloads": sum(k.result.wins_alone for k in result.kernels),
            "kept": len(result.model_check.kept) if result.model_check else None}


def untuned_model(name: str) -> dict:
    """A model that is not tuned here (--records: its records come from an earlier run)."""
    make, inputs = zoo_model(name, 1)
    return {"model": name, "make": make, "inputs": inputs, "tasks": "-", "trials": "-", "tuning_seconds": None,
            "tuned_workloads": "-", "kept": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seconds", type=float, nargs="+", help="budget per model, in --models order")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of turns of the final timing (one block each)")
    parser.add_argument("--no-model-check", action="store_true")
    parser.add_argument("--records", help="time with this records file of an earlier run; tune nothing")
    parser.add_argument("--json")
    args = parser.parse_args()
    budgets = args.seconds or [BUDGETS[m] for m in args.models]
    os.environ["TENSORKILN_TUNING_RECORDS"] = args.records or os.path.join(tempfile.mkdtemp(prefix="tk-tuning-"),
                                                                           "records.jsonl")
    note(f"records: {os.environ['TENSORKILN_TUNING_RECORDS']}")
    print(f"whole models tuned, {machine_summary()}; float32, batch 1; at most {args.trials} trials per workload; "
          f"in-model check {'off' if args.no_model_check else 'on'}; ms are medians of {2 * args.rounds} blocks "
          "in turns, the speedup the median of the pairs' untuned/tuned")
    models = [untuned_model(m) if args.records else tune_model(m, args.trials, s, not args.no_model_check)
              for m, s in zip(args.models, budgets)]
    runs = {}
    for m in models:
        with using_configs({}):
            untuned = m["make"]()
            untuned(*m["inputs"])
        tuned = m["make"]()  # with the records kept
        tuned(*m["inputs"])
        m["same_program"] = same_program(untuned, tuned, m["inputs"])
        runs[f"{m['model']} untuned"] = (lambda f=untuned, x=m["inputs"]: f(*x))
        runs[f"{m['model']} tuned"] = (lambda f=tuned, x=m["inputs"]: f(*x))
    note("timing all builds in turns")
    blocks = alternating_blocks(runs, pairs=2 * args.rounds)  # each round: both orders
    rows = []
    for m in models:
        untuned, tuned = blocks[f"{m['model']} untuned"], blocks[f"{m['model']} tuned"]
        before, after = statistics.median(untuned), statistics.median(tuned)
        speedup = statistics.median(u / t for u, t in zip(untuned, tuned))  # each round's pair, one phase
        m["untuned_ms"], m["tuned_ms"], m["speedup"] = before * 1e3, after * 1e3, speedup
        rows.append([m["model"], str(m["tasks"]), str(m["trials"]),
                     "-" if m["tuning_seconds"] is None else f"{m['tuning_seconds']:.0f} s",
                     str(m["tuned_workloads"]), "-" if m["kept"] is None else str(m["kept"]),
                     f"{before * 1e3:.2f}", f"{after * 1e3:.2f}", f"{speedup:.2f}x",
                     "yes" if m["same_program"] else "no"])
    print_table(["model", "tasks", "trials", "tk.tune time", "searches won", "kept in model", "untuned ms",
                 "tuned ms", "tuned speedup", "same C"], rows)
    if any(m["same_program"] for m in models):
        print("same C: no record was kept, the tuned build is the untuned program; its ratio is this run's noise")
    if args.json:
        write_json(args.json, {"models": [{k: v for k, v in m.items() if k not in ("make", "inputs")}
                                          for m in models]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
