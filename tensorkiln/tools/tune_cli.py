"""`tensorkiln tune MODEL.onnx|ZOO-NAME --trials N --seconds S`: tune a model's kernels, show before and after.

For an ONNX file (inputs: seeded random data of the declared shapes, or of
--input-shape) or a model of the zoo (resnet18, mobilenetv2, bert, mlp, at
--batch): tk.tune searches every distinct tunable kernel workload with a
progress bar, the task scheduler sharing --seconds among them (tune/scheduler.py),
then prints a table of the workloads (uses, default and best time, speedup, trials) and
the whole model's latency untuned and tuned, timed in alternating turns in
this run, and writes the convergence plot (best time against trials, one
line per kernel, relative to its default; PNG, needs matplotlib).
Before the final timing the records are checked inside the model
(tune/model_check.py: each tuned workload's kernels profiled in the model,
untuned and tuned in turns; a record that does not pay there is withdrawn),
unless --no-model-check; its time comes out of --seconds.
"""
from __future__ import annotations

import argparse
import re
import sys

import numpy as np

from .. import models
from ..frontend.creation import manual_seed
from ..frontend.jit import jit
from ..importers.onnx.model import load, random_inputs
from ..kernels.tuned import using_configs
from ..tune import TuneResult, kernel_workloads, tune
from .export_cli import parse_shape
from .timing import interleaved_medians

ZOO = ("resnet18", "mobilenetv2", "bert", "mlp")


def zoo_model(name: str, batch: int):
    """(a compiler of the zoo model for inference, its example inputs).

    Inference as `tensorkiln bench` runs the model: eval mode (batch norm on its running statistics,
    dropout off) and no gradients, so the weights are constants of the compiled program (blocked,
    Winograd-transformed and packed at compile time) and the tuned kernels are the deployed ones.
    """
    manual_seed(0)
    rng = np.random.default_rng(0)
    model = models.create(name).eval().requires_grad_(False)
    if name in ("resnet18", "mobilenetv2"):
        inputs = (rng.standard_normal((batch, 3, 224, 224)).astype(np.float32),)
    elif name == "bert":
        inputs = (rng.integers(0, 30522, (batch, 128)).astype(np.int64),)
    else:
        inputs = (rng.standard_normal((batch, 784)).astype(np.float32),)
    return (lambda: jit(model)), inputs


SOURCE_LINE = re.compile(r"[\w.<>-]+\.py:\d+")  # a kernel comment's user line: where each build was traced


def same_program(a, b, inputs: tuple) -> bool:
    """Whether two builds of a model compiled the same generated C (the user lines in comments aside)."""
    paths = [f.report(*inputs).source_path for f in (a, b)]
    if None in paths:
        return False
    with open(paths[0]) as first, open(paths[1]) as second:
        return SOURCE_LINE.sub("", first.read()) == SOURCE_LINE.sub("", second.read())


def onnx_model(path: str, shapes: dict):
    """(a loader of the ONNX model, its example inputs)."""
    module = load(path)
    return (lambda: load(path)), tuple(random_inputs(module, seed=0, shapes=shapes).values())


def progress_bar(total_trials: int):
    """A progress callback drawing one line on stderr: trials done, the kernel, its best so far."""
    done = [0]

    def report(kernel, workload, result, trial) -> None:
        done[0] += 1
        width = 30
        filled = min(width, width * done[0] // max(total_trials, 1))
        best = min((t.score for t in result.trials if t.score is not None), default=1.0)
        mark = "" if trial.measurement.ok else f" (failed: {trial.measurement.error[:40]})"
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done[0]} trials  {kernel[:24]:<24} "
                         f"best {best:.3f}x of default{mark}\033[K")
        sys.stderr.flush()
    return report


def convergence_plot(result: TuneResult, path: str) -> str:
    """Best time relative to the default against trials, one line per kernel; what was written, or why not."""
    if not result.kernels:  # e.g. a batch-1 MLP, whose matrix-vector kernels have no template
        return "no convergence plot: no kernel was searched"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no convergence plot: matplotlib is not installed (pip install tensorkiln[plot])"
    fig, ax = plt.subplots(figsize=(7, 4))
    for kernel in result.kernels:
        points = kernel.result.convergence()
        ax.step([p[0] for p in points], [p[1] / kernel.default_seconds for p in points], where="post",
                label=f"{kernel.kernel} ({kernel.workload})")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("trials")
    ax.set_ylabel("best time / default time")
    ax.set_title("tuning convergence (lower is faster)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"convergence plot: {path}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tensorkiln tune`; returns the exit status."""
    parser = argparse.ArgumentParser(prog="tensorkiln tune", description="tune a model's kernels on this machine")
    parser.add_argument("model", help=f"an .onnx file or a zoo model: {', '.join(ZOO)}")
    parser.add_argument("--trials", type=int, default=64, help="candidates per kernel at most (default 64)")
    parser.add_argument("--seconds", type=float, default=None, help="the whole search's time budget")
    parser.add_argument("--strategy", default="evolutionary",
                        choices=("evolutionary", "genetic", "annealing", "random"))
    parser.add_argument("--batch", type=int, default=1, help="batch of a zoo model's inputs (default 1)")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=SHAPE",
                        help="shape of an ONNX model's random input, e.g. x=1x3x224x224")
    parser.add_argument("--plot", default="tune-convergence.png", help="where the convergence plot goes")
    parser.add_argument("--no-model-check", action="store_true",
                        help="keep every record the searches confirmed, without checking it inside the model")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.model.endswith(".onnx"):
        make, inputs = onnx_model(args.model, dict(parse_shape(s, "--input-shape") for s in args.input_shape))
    elif args.model in ZOO:
        make, inputs = zoo_model(args.model, args.batch)
    else:
        print(f"tensorkiln tune: {args.model!r} is neither an .onnx file nor a zoo model ({', '.join(ZOO)})",
              file=sys.stderr)
        return 2
    with using_configs({}):  # the untuned build, for the comparison
        untuned = make()
        untuned(*inputs)
    workloads = len(kernel_workloads(untuned, *inputs))
    print(f"{workloads} tunable kernel workload(s), up to {args.trials} trials each", file=sys.stderr)
    result = tune(untuned, *inputs, trials=args.trials, seconds=args.seconds, strategy=args.strategy,
                  progress=progress_bar(args.trials * workloads), check_model=not args.no_model_check, rebuild=make)
    sys.stderr.write("\n")
    print(result)
    tuned = make()  # compiled with the records just written
    tuned(*inputs)
    with using_configs({}):
        untuned = make()
        untuned(*inputs)
    latency = interleaved_medians({"untuned": lambda: untuned(*inputs), "tuned": lambda: tuned(*inputs)})
    same = same_program(untuned, tuned, inputs)
    print(f"model latency, in turns: untuned {latency['untuned'] * 1e3:.2f} ms, tuned {latency['tuned'] * 1e3:.2f} ms "
          f"({latency['untuned'] / latency['tuned']:.2f}x)"
          + ("; the same C (no record changed the program): that ratio is this run's noise" if same else ""))
    print(convergence_plot(result, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
