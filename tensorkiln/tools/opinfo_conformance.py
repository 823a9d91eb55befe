"""PyTorch's OpInfo samples through tensorkiln's compiled torch path, against eager PyTorch.

`torch.testing._internal.common_methods_invocations.op_db` describes ~700
operators with sample inputs per dtype. For each sample, the operator applied to
the sample's tensors becomes a function of those tensors, which tensorkiln's
torch.compile backend compiles (ATen graph, tensorkiln's lowerings, generated C)
and runs; the result is compared with eager PyTorch at the dtype's default
tolerance of `torch.testing.assert_close` (the tolerance OpInfo tests use
unless an operator overrides it), with matching shapes and dtypes. Outcomes:

- passed: every output agrees;
- failed: an output differs (a wrong result), or tensorkiln's code raised
  something other than a refusal (a crash);
- refused: tensorkiln raised `UnsupportedOpError` naming the op it does not lower,
  or PyTorch's tracer could not make an ATen graph of the sample (`.item()`,
  data-dependent control flow: torch.compile would run such code eagerly);
- skipped: eager PyTorch raises on the sample, its results are uninitialized memory
  (`empty` and its relatives), or the operator is random (two
  seeds give different results, or two calls of tensorkiln's compiled graph, which
  draws random numbers, do:
  an operator that seeds PyTorch's generator itself, as OpInfo's random ones
  do, gives PyTorch's values only where PyTorch's generator draws them, which
  Inductor reaches by running the call eagerly after a graph break), so there
  is nothing to compare; tests/importers/test_torch_random.py checks the
  distributions of tensorkiln's numbers instead.

With `inductor=True` the same samples go through `torch.compile`'s default
backend too, in the same run, and get the same outcomes (a refusal there is any
exception). Inductor runs an operator it has no lowering for by calling
PyTorch's own ATen kernel from its generated code (a `FallbackKernel`); a
passed sample that did so is counted apart ("passed through ATen fallback
kernels"), so its own code generation can be compared with tensorkiln's, which
has no such fallback by default. With `fallback=True` the samples tensorkiln
refuses run again through its backend's `fallback=True` (the unsupported ATen
ops run with PyTorch, the rest compiled), the counterpart of Inductor's fallback
kernels; those passes are counted apart in the same way.

    python -m tensorkiln.tools.opinfo_conformance [--ops add,cumsum] [--samples N] [--inductor] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..errors import TensorKilnError, UnsupportedOpError
from ..importers.torch.backend import BackendOptions, TensorKilnGraph, TorchFallbackWarning

_PACKAGE = Path(__file__).resolve().parents[1]
_HARNESS = {Path(__file__).resolve(), _PACKAGE / "importers" / "torch" / "backend.py"}

OUTCOMES = ("passed", "failed", "refused", "skipped")
FALLBACK_NOTE = "through ATen fallback kernels: "  # the detail of an Inductor pass that called ATen kernels


@dataclass
class SampleResult:
    """One sample of one OpInfo through one compiler."""

    op: str
    sample: int
    outcome: str
    detail: str = ""


@dataclass
class Report:
    """The outcomes of every sample, per compiler."""

    tensorkiln: list[SampleResult] = field(default_factory=list)
    inductor: list[SampleResult] = field(default_factory=list)
    tensorkiln_fallback: list[SampleResult] = field(default_factory=list)  # fallback=True (refused ones rerun)

    def counts(self, compiler: str) -> Counter:
        return Counter(r.outcome for r in getattr(self, compiler))


def op_database() -> list:
    """PyTorch's OpInfo list (imported on demand: it takes a few seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def op_label(info) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def as_function(info, sample):
    """(fn, tensors): fn(*tensors) applies the operator to the sample, its tensors as arguments."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    op = info.op

    def fn(*tensors):
        filled = list(leaves)
        for position, tensor in zip(positions, tensors):
            filled[position] = tensor
        first, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op(first, *args, **kwargs)

    return fn, [leaves[i] for i in positions]


def _same(actual, expected) -> str | None:
    """None when `actual` matches `expected` (eager) at assert_close's tolerance, else why not."""
    a_leaves = pytree.tree_leaves(actual)  # containers may differ (a named tuple comes back a tuple)
    e_leaves = pytree.tree_leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return f"{len(a_leaves)} outputs instead of {len(e_leaves)}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i} is {type(a).__name__}, not a tensor"
            try:
                torch.testing.assert_close(a, e, equal_nan=True, check_device=False, check_stride=False)
            except AssertionError as err:
                return f"output {i}: " + str(err).splitlines()[0] + " " + " ".join(str(err).splitlines()[1:4])
        elif a != e:
            return f"output {i}: {a!r} instead of {e!r}"
    return None


# OpInfos whose results are uninitialized memory: two eager calls may happen to agree (a freed block
# reused), so the seed test above cannot be relied on to skip them
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                           "new_empty_strided"})


def _is_random(fn, tensors) -> bool:
    torch.manual_seed(0)
    first = fn(*tensors)
    torch.manual_seed(1)
    second = fn(*tensors)
    return _same(first, second) is not None


def run_tensorkiln(fn, tensors, random: list | None = None) -> object:
    """The compiled graph's result; with a list `random`, append True there when the graph draws random
    numbers and a second call gives other ones. A graph without random ops that differs between two calls
    is not skipped: it is compared as it is, so a nondeterministic kernel shows as a failure."""
    graph = TensorKilnGraph(fn, list(tensors), BackendOptions())
    result = graph(*tensors)
    if random is not None and graph.draws_random_numbers and _same(graph(*tensors), result) is not None:
        random.append(True)
    return result


def run_tensorkiln_fallback(fn, tensors) -> object:
    """tensorkiln with fallback=True: ATen ops it does not lower run with PyTorch between compiled parts."""
    graph = TensorKilnGraph(fn, list(tensors), BackendOptions(fallback=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = graph(*tensors)
    eager = [line.strip() for w in caught if issubclass(w.category, TorchFallbackWarning)
             for line in str(w.message).splitlines()[1:]]
    return result, eager


def run_inductor(fn, tensors) -> object:
    torch._dynamo.reset()  # every sample's function shares one code object: no recompile limit
    return torch.compile(fn, backend="inductor", dynamic=False)(*tensors)


class InductorFallbacks:
    """Records the ATen ops Inductor's generated code calls as fallback kernels while active."""

    def __init__(self):
        self.ops: list[str] = []

    def __enter__(self) -> "InductorFallbacks":
        import torch._inductor.config as config
        import torch._inductor.ir as ir
        self._ir, self._init, self._cache = ir, ir.FallbackKernel.__init__, config.fx_graph_cache
        config.fx_graph_cache = False  # a cached graph is not lowered again: its fallbacks would go unseen
        record, original = self.ops, self._init

        def init(kernel_self, layout, kernel, *args, **kwargs):
            record.append(str(kernel))
            original(kernel_self, layout, kernel, *args, **kwargs)
        ir.FallbackKernel.__init__ = init
        return self

    def __exit__(self, *exc) -> None:
        import torch._inductor.config as config
        self._ir.FallbackKernel.__init__ = self._init
        config.fx_graph_cache = self._cache


def raised_by_tensorkiln(err: BaseException) -> bool:
    """True when tensorkiln's own code (not PyTorch's tracer, called by the backend) raised `err`."""
    if isinstance(err, TensorKilnError):
        return True
    tb = err.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        if _PACKAGE in path.parents and path not in _HARNESS:
            return True
        tb = tb.tb_next
    return False


def check_sample(compile_and_run, fn, tensors, expected, tensorkiln: bool = True) -> tuple[str, str]:
    """(outcome, detail) of one compiler on one sample; for another compiler every exception is a refusal."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = compile_and_run(fn, tensors)
    except Exception as err:
        message = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        if isinstance(err, UnsupportedOpError):
            return "refused", str(err).splitlines()[-1].strip()[:300]
        if tensorkiln and raised_by_tensorkiln(err):
            return "failed", message  # a crash is a failure
        return "refused", ("not traceable: " if tensorkiln else "") + message
    why = _same(actual, expected)
    return ("failed", why[:300]) if why else ("passed", "")


def run(ops: list[str] | None = None, samples_per_op: int | None = None, dtypes=(torch.float32,),
        inductor: bool = False, log=None, fallback: bool = False) -> Report:
    """Every sample (up to `samples_per_op` per OpInfo and dtype) of the OpInfos named in `ops` (all when None)."""
    report = Report()
    wanted = set(ops) if ops else None
    for info in op_database():
        label = op_label(info)
        if wanted is not None and label not in wanted and info.name not in wanted:
            continue
        for dtype in dtypes:
            if dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                samples = list(info.sample_inputs("cpu", dtype, requires_grad=False))
            except Exception as err:  # an OpInfo that cannot make samples here
                report.tensorkiln.append(SampleResult(label, -1, "skipped", f"no samples: {err}"[:200]))
                continue
            for index, sample in enumerate(samples[:samples_per_op]):
                name = f"{label}[{str(dtype).removeprefix('torch.')}]"
                _check_one(report, info, name, index, sample, inductor, log, fallback)
    return report


def _check_one(report: Report, info, name: str, index: int, sample, inductor: bool, log,
               fallback: bool = False) -> None:
    fn, tensors = as_function(info, sample)
    try:
        with torch.no_grad():
            expected = fn(*tensors)
            random = _is_random(fn, tensors)
    except Exception as err:
        reason = f"eager PyTorch raises {type(err).__name__}"
        _skip(report, SampleResult(name, index, "skipped", reason), inductor, fallback)
        return
    if random or not tensors or info.name in UNINITIALIZED:
        reason = "random results" if random else "no tensor inputs" if not tensors else "uninitialized values"
        _skip(report, SampleResult(name, index, "skipped", reason), inductor, fallback)
        return
    draws: list = []
    outcome, detail = check_sample(lambda f, t: run_tensorkiln(f, t, draws), fn, tensors, expected)
    if draws:
        _skip(report, SampleResult(name, index, "skipped", "random results (tensorkiln's calls differ)"),
              inductor, fallback)
        return
    report.tensorkiln.append(SampleResult(name, index, outcome, detail))
    if log is not None:
        log(f"tensorkiln {outcome:8} {name} #{index} {detail}")
    if fallback:
        result = SampleResult(name, index, outcome, detail)
        if outcome == "refused":
            eager: list[str] = []

            def partly_eager(fn, tensors):
                output, ops = run_tensorkiln_fallback(fn, tensors)
                eager.extend(ops)
                return output
            outcome, detail = check_sample(partly_eager, fn, tensors, expected)
            if outcome == "passed":
                detail = FALLBACK_NOTE + ", ".join(sorted(set(eager)))[:300]
            result = SampleResult(name, index, outcome, detail)
        report.tensorkiln_fallback.append(result)
    if inductor:
        with InductorFallbacks() as fallbacks:
            outcome, detail = check_sample(run_inductor, fn, tensors, expected, tensorkiln=False)
        if outcome == "passed" and fallbacks.ops:
            detail = FALLBACK_NOTE + ", ".join(sorted(set(fallbacks.ops)))[:300]
        report.inductor.append(SampleResult(name, index, outcome, detail))
        if log is not None:
            log(f"inductor   {outcome:8} {name} #{index} {detail}")


def _skip(report: Report, result: SampleResult, inductor: bool, fallback: bool) -> None:
    report.tensorkiln.append(result)
    if inductor:
        report.inductor.append(result)
    if fallback:
        report.tensorkiln_fallback.append(result)


def summary(report: Report) -> str:
    lines = []
    for compiler in ("tensorkiln", "tensorkiln_fallback", "inductor"):
        counts = report.counts(compiler)
        compared = counts["passed"] + counts["failed"] + counts["refused"]
        if not compared and compiler != "tensorkiln":
            continue
        rate = counts["passed"] / compared if compared else 0.0
        label = "tensorkiln, fallback=True" if compiler == "tensorkiln_fallback" else compiler
        lines.append(f"{label}: {counts['passed']} passed, {counts['failed']} failed, {counts['refused']} refused, "
                     f"{counts['skipped']} skipped; pass rate {rate:.1%} of {compared} compared samples")
        through_aten = sum(r.outcome == "passed" and r.detail.startswith(FALLBACK_NOTE)
                           for r in getattr(report, compiler))
        if through_aten:
            lines.append(f"  of these, {through_aten} passed through ATen kernels, "
                         f"{counts['passed'] - through_aten} by its own code "
                         f"({(counts['passed'] - through_aten) / compared:.1%})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=None, help="at most this many samples per OpInfo and dtype")
    parser.add_argument("--dtypes", default="float32", help="comma-separated torch dtypes (default float32)")
    parser.add_argument("--inductor", action="store_true", help="also run torch.compile's Inductor on each sample")
    parser.add_argument("--fallback", action="store_true",
                        help="also rerun the samples tensorkiln refuses with its backend's fallback=True")
    parser.add_argument("--json", help="write every sample's outcome here")
    parser.add_argument("--verbose", action="store_true", help="print every sample's outcome")
    args = parser.parse_args(argv)
    dtypes = tuple(getattr(torch, name) for name in args.dtypes.split(","))
    start = time.perf_counter()
    report = run(args.ops.split(",") if args.ops else None, args.samples, dtypes, args.inductor,
                 log=print if args.verbose else None, fallback=args.fallback)
    seconds = time.perf_counter() - start
    failures = [r for r in report.tensorkiln if r.outcome == "failed"]
    for r in failures:
        print(f"FAILED {r.op} #{r.sample}: {r.detail}")
    print(summary(report))
    print(f"({seconds:.0f} s; torch {torch.__version__}; dtypes {args.dtypes}; "
          f"samples per OpInfo and dtype: {args.samples or 'all'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tensorkiln": [asdict(r) for r in report.tensorkiln],
                       "inductor": [asdict(r) for r in report.inductor],
                       "tensorkiln_fallback": [asdict(r) for r in report.tensorkiln_fallback],
                       "counts": {c: dict(report.counts(c)) for c in ("tensorkiln", "tensorkiln_fallback",
                                                                      "inductor")},
                       "seconds": seconds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
