"""The ONNX backend conformance cases: where they are, and how one is run through tensorkiln.

The `onnx` wheel ships `onnx/backend/test/data/{pytorch-converted,pytorch-operator,...}`;
the node cases (`data/node`) were shipped up to onnx 1.17 and are generated
from `onnx.backend.test.case.node` since: when the package has no `data/node`,
they are written once (same layout: model.onnx, test_data_set_N/input_K.pb,
output_K.pb, plus data.json with the case's rtol/atol) into
`$TENSORKILN_CACHE/onnx-backend-node-<onnx version>` (default ~/.cache/tensorkiln),
under a file lock, so parallel test workers share one copy.

Comparison follows onnx's backend runner: equal shapes and dtypes, then
`np.testing.assert_allclose(rtol, atol)` with the case's tolerance (default
rtol=1e-3, atol=1e-7; bfloat16 at least 2**-6 relative, as onnx's runner; float16
at least 2**-9 relative, four float16 ULPs, because compiled kernels keep fused
intermediates in float32 where the numpy reference rounds after every op).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np

SUITES = ("node", "pytorch-converted", "pytorch-operator")


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    path: str

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"


def _cache_dir() -> str:
    return os.environ.get("TENSORKILN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tensorkiln")


def _write_case(case, directory: str) -> None:
    from onnx import numpy_helper
    os.makedirs(directory)
    with open(os.path.join(directory, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    with open(os.path.join(directory, "data.json"), "w") as f:
        json.dump({"rtol": case.rtol, "atol": case.atol}, f)
    graph = case.model.graph
    for i, (inputs, outputs) in enumerate(case.data_sets or []):
        data_dir = os.path.join(directory, f"test_data_set_{i}")
        os.makedirs(data_dir)
        for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for j, value in enumerate(values):
                if j < len(infos) and not infos[j].type.HasField("tensor_type"):
                    return  # sequences, maps, optionals: the model is reported unsupported anyway
                proto = value if hasattr(value, "SerializeToString") else numpy_helper.from_array(
                    np.asarray(value), infos[j].name if j < len(infos) else "")
                with open(os.path.join(data_dir, f"{kind}_{j}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())


def _generate_node_cases(target: str) -> None:
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(target))
    for case in cases:
        _write_case(case, os.path.join(tmp, case.name))
    os.rename(tmp, target)  # publish atomically


def node_cases_dir() -> str:
    """The directory of the node cases: shipped with onnx, or generated once into the cache."""
    import onnx
    shipped = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(shipped):
        return shipped
    target = os.path.join(_cache_dir(), f"onnx-backend-node-{onnx.__version__}")
    if os.path.isdir(target):
        return target
    os.makedirs(_cache_dir(), exist_ok=True)
    with open(os.path.join(_cache_dir(), ".onnx-node-cases.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(target):
            _generate_node_cases(target)
    return target


def all_cases() -> list[Case]:
    """Every conformance case, sorted by suite and name."""
    import onnx
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    cases = []
    for suite in SUITES:
        root = node_cases_dir() if suite == "node" else os.path.join(data, suite)
        if not os.path.isdir(root):
            continue
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(os.path.join(path, "model.onnx")):
                cases.append(Case(suite, name, path))
    return cases


def load_case_data(case: Case):
    """(model, rtol, atol, [(inputs by name, expected outputs)]) of a case."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(case.path, "model.onnx"))
    rtol, atol = 1e-3, 1e-7
    meta = os.path.join(case.path, "data.json")
    if os.path.exists(meta):
        with open(meta) as f:
            data = json.load(f)
        rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
    sets = []
    for entry in sorted(os.listdir(case.path)):
        data_dir = os.path.join(case.path, entry)
        if not entry.startswith("test_data_set_") or not os.path.isdir(data_dir):
            continue
        inputs, outputs = {}, []
        j = 0
        while os.path.exists(os.path.join(data_dir, f"input_{j}.pb")):
            proto = onnx.TensorProto()
            with open(os.path.join(data_dir, f"input_{j}.pb"), "rb") as f:
                proto.ParseFromString(f.read())
            name = model.graph.input[j].name if j < len(model.graph.input) else proto.name
            inputs[name] = numpy_helper.to_array(proto)
            j += 1
        j = 0
        while os.path.exists(os.path.join(data_dir, f"output_{j}.pb")):
            proto = onnx.TensorProto()
            with open(os.path.join(data_dir, f"output_{j}.pb"), "rb") as f:
                proto.ParseFromString(f.read())
            outputs.append(numpy_helper.to_array(proto))
            j += 1
        sets.append((inputs, outputs))
    return model, rtol, atol, sets


def assert_outputs_match(actual, expected, rtol: float, atol: float) -> None:
    """onnx's backend-runner comparison: shapes, dtypes, then allclose."""
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for i, (out, ref) in enumerate(zip(actual, expected)):
        out, ref = np.asarray(out), np.asarray(ref)
        assert out.shape == ref.shape, f"output {i}: shape {out.shape}, expected {ref.shape}"
        if ref.dtype.name == "bfloat16":
            ref, r = ref.astype(np.float32), max(rtol, 2 ** -6)
        else:
            assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
            # float16: compiled kernels keep fused intermediates in float32 where onnx's numpy
            # reference rounds after every op, so allow four float16 ULPs
            r = max(rtol, 2 ** -9) if ref.dtype == np.float16 else rtol
        np.testing.assert_allclose(out, ref, rtol=r, atol=atol, err_msg=f"output {i}")


def run_case(case: Case, backend: str):
    """Run a case through tk.onnx.load; returns None, or the UnsupportedOpError raised at load time."""
    import tensorkiln as tk
    model, rtol, atol, sets = load_case_data(case)
    try:
        module = tk.onnx.load(model, backend=backend)
    except tk.onnx.UnsupportedModelError as err:
        return err
    for inputs, expected in sets:
        feed = {k: v for k, v in inputs.items() if k in module.input_types}
        actual = module(**feed)
        assert_outputs_match(actual, expected, rtol, atol)
        if backend == "c":  # the count is of cases the generated C ran, not the interpreter behind it
            report = module.report(**feed)
            assert report.backend == "c", f"ran in the reference interpreter: {report.fallback_reason}"
    return None


def cleanup_generated() -> None:  # pragma: no cover (manual use)
    """Remove generated node cases (they are regenerated on the next run)."""
    import onnx
    shutil.rmtree(os.path.join(_cache_dir(), f"onnx-backend-node-{onnx.__version__}"), ignore_errors=True)
