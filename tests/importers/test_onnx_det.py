"""Det, compiled, against numpy's LAPACK determinant: sizes 1 to 6, batches, singular and row-swapping matrices."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402

rng = np.random.default_rng(23)


@pytest.mark.parametrize("shape,dtype", [((1, 1), np.float32), ((3, 3), np.float32), ((2, 1, 5, 5), np.float32),
                                         ((4, 6, 6), np.float64)], ids=str)
def test_det_matches_numpy(shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1, shape[-1], shape[-1])
    if shape[-1] > 2 and flat.shape[0] > 1:
        flat[0, 1] = flat[0, 0] * 2.0  # singular: two proportional rows
        flat[1, :, 0] = 0.0  # a zero column
    if shape[-1] > 1:
        flat[-1, 0, 0] = 0.0  # a zero first pivot: elimination must swap rows
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    module = tk.onnx.load(model([helper.make_node("Det", ["x"], ["y"])], [("x", elem, shape)], [("y", elem, None)]))
    got = module(x)[0]
    assert module.report(x).backend == "c"
    assert got.dtype == dtype and got.shape == shape[:-2]
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=tolerance, atol=tolerance)


def test_det_of_a_non_square_input_names_the_node_and_shape():
    m = model([helper.make_node("Det", ["x"], ["y"], name="volume")], [("x", TensorProto.FLOAT, (2, 3))],
              [("y", TensorProto.FLOAT, None)])
    with pytest.raises(tk.TensorKilnError, match=r"'volume'.*\[2, 3\]"):
        tk.onnx.load(m)(np.zeros((2, 3), np.float32))
