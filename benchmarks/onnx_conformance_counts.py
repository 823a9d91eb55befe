"""Count the ONNX backend conformance cases tensorkiln and ONNX Runtime pass, on the same cases.

    python benchmarks/onnx_conformance_counts.py [--backend c|interpreter] [--jobs 2] [--json out.json]
                                                 [--suite node] [-k substring]

Each case of onnx's backend suites (node, pytorch-converted, pytorch-operator;
tests/importers/onnx_cases.py finds them) runs through `tk.onnx.load` with the
chosen backend (default "c": the generated C must run it, not the interpreter
behind it) and through onnxruntime's CPU provider, both compared with onnx's
expected outputs by onnx's runner rule. A case is "passed", "failed" (wrong
answer or an exception), "unsupported" (tensorkiln refuses the model at load
time; ORT: it fails to load or run the model) or "known" (listed in
onnx_conformance_skips.py). Prints both counts and the cases unsupported here
that ONNX Runtime passes, grouped by operator, most cases first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "importers"))

from onnx_cases import all_cases, assert_outputs_match, load_case_data, run_case  # noqa: E402
from onnx_conformance_skips import SKIPS  # noqa: E402


def _operator(case) -> str:
    """The operator a case tests: its node's op type for one-node models, else "multi-node"."""
    import onnx
    nodes = onnx.load(os.path.join(case.path, "model.onnx"), load_external_data=False).graph.node
    return nodes[0].op_type if len(nodes) == 1 else "multi-node"


def tensorkiln_outcome(case, backend: str) -> tuple[str, str]:
    """(outcome, detail) of one case through tensorkiln."""
    if case.id in SKIPS:
        return "known", SKIPS[case.id]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            unsupported = run_case(case, backend)
    except Exception as err:  # a wrong answer or tensorkiln's own failure: both count as failed
        return "failed", f"{type(err).__name__}: {str(err)[:300]}"
    if unsupported is not None:
        return "unsupported", "; ".join(str(item) for item in unsupported.items)[:300]
    return "passed", ""


def onnxruntime_outcome(case) -> tuple[str, str]:
    """(outcome, detail) of one case through onnxruntime's CPU provider."""
    import onnxruntime as ort
    model, rtol, atol, sets = load_case_data(case)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its expected failures are counted, not logged
    ort.set_default_logger_severity(4)
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as err:
        return "unsupported", f"{type(err).__name__}: {str(err)[:300]}"
    names = {i.name for i in session.get_inputs()}
    try:
        for inputs, expected in sets:
            actual = session.run(None, {k: v for k, v in inputs.items() if k in names})
            assert_outputs_match(actual, expected, rtol, atol)
    except Exception as err:
        return "failed", f"{type(err).__name__}: {str(err)[:300]}"
    return "passed", ""


def count_case(case, backend: str) -> dict:
    """Both outcomes of one case."""
    tk_outcome, tk_detail = tensorkiln_outcome(case, backend)
    ort_outcome, ort_detail = onnxruntime_outcome(case)
    return {"case": case.id, "operator": _operator(case), "tensorkiln": tk_outcome, "tensorkiln_detail": tk_detail,
            "onnxruntime": ort_outcome, "onnxruntime_detail": ort_detail}


def _count_case_star(args):
    return count_case(*args)


def summary(rows: list[dict]) -> str:
    """The counts of both runtimes and ORT-passed cases unsupported here, by operator."""
    lines = [f"{len(rows)} cases"]
    for runtime in ("tensorkiln", "onnxruntime"):
        c = Counter(r[runtime] for r in rows)
        lines.append(f"{runtime:<12} passed {c['passed']}, failed {c['failed']}, "
                     f"unsupported {c['unsupported']}, known skips {c['known']}")
    gap = defaultdict(list)
    for r in rows:
        if r["onnxruntime"] == "passed" and r["tensorkiln"] != "passed":
            gap[(r["operator"], r["tensorkiln"])].append(r["case"])
    lines.append(f"passed by onnxruntime, not by tensorkiln: {sum(map(len, gap.values()))}")
    for (op, outcome), cases in sorted(gap.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"  {len(cases):4d}  {op:<32} {outcome:<12} {cases[0]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="c", choices=("c", "interpreter"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--suite", default=None, help="only this suite (node, pytorch-converted, pytorch-operator)")
    parser.add_argument("-k", default=None, help="only cases whose id contains this")
    parser.add_argument("--json", default=None, help="write every case's outcomes here")
    parser.add_argument("--failures", action="store_true", help="also list tensorkiln's failed cases")
    args = parser.parse_args()
    cases = [c for c in all_cases() if (args.suite is None or c.suite == args.suite) and (args.k is None or args.k in c.id)]
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    os.environ.setdefault("TENSORKILN_VERBOSE", "0")  # no compile progress lines between the results
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(_count_case_star, [(c, args.backend) for c in cases], chunksize=4))
    print(f"ONNX backend conformance, tensorkiln backend={args.backend}, onnxruntime CPUExecutionProvider")
    print(summary(rows))
    if args.failures:
        for r in rows:
            if r["tensorkiln"] == "failed":
                print(f"FAILED {r['case']}: {r['tensorkiln_detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "cases": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
