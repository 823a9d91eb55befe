"""tk.from_torch: torch.export + core-ATen decompositions into a tensorkiln compiled callable.

Tolerance (float32 logits): rtol 1e-4, atol 1e-4 (docs/pytorch.md).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import LOWERINGS, TorchProgram  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the model helpers sit next to this file
from tensorkiln.tools import torch_reference as tm  # noqa: E402
import torch_ops_models as zoo  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning")  # inside torch.export


def assert_close(actual, expected):
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e)
        return
    assert isinstance(actual, tk.Tensor)
    assert tuple(actual.shape) == tuple(expected.shape)
    assert actual.dtype.name == str(expected.dtype).replace("torch.", "")
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def imported(model, inputs):
    program = tk.from_torch(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    return program, expected


@pytest.fixture(scope="module")
def resnet():
    model, x = tm.resnet18(), tm.image()
    return imported(model, (x,)) + (x,)


def test_import_tensorkiln_does_not_import_torch():
    code = "import sys, tensorkiln; assert 'torch' not in sys.modules; assert callable(tensorkiln.from_torch)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_resnet18_matches_eager(resnet):
    program, expected, x = resnet
    assert isinstance(program, TorchProgram)
    assert_close(program(x), expected)


def test_inputs_as_numpy_tk_or_torch(resnet):
    program, expected, x = resnet
    for value in (x.numpy(), tk.tensor(x.numpy())):
        assert_close(program(value), expected)


def test_report_shows_compiled_kernels(resnet):
    program, _, x = resnet
    report = program.report(x)
    assert report.backend == "c" and len(report.kernels) > 0


def test_wrong_shape_is_refused(resnet):
    program, _, _ = resnet
    with pytest.raises(tk.ShapeError, match="exported with shape"):
        program(np.zeros((2, 3, 64, 64), np.float32))


def test_mobilenet_v2_matches_eager():
    model, x = tm.mobilenet_v2(), tm.image()
    program, expected = imported(model, (x,))
    assert_close(program(x), expected)


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_bert_encoder_matches_eager(use_sdpa):
    model, inputs = tm.bert_encoder(use_sdpa=use_sdpa), tm.bert_inputs()
    program, expected = imported(model, inputs)
    assert_close(program(*inputs), expected)


@pytest.mark.parametrize("name", ["Elementwise", "Movement", "Reductions", "Convolutions", "Attention"])
def test_op_coverage(name):
    inputs = getattr(zoo, f"{name.lower()}_inputs")()
    program, expected = imported(zoo.seeded(getattr(zoo, name)), inputs)
    assert_close(program(*inputs), expected)


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        return torch.histc(x, 4) + torch.fft.rfft(x).abs().sum() + torch.histc(x, 4)


def test_unsupported_ops_are_listed_all_at_once():
    with pytest.raises(tk.UnsupportedOpError) as info:
        tk.from_torch(TwoUnsupported().eval(), (torch.randn(4, 5),))
    message = str(info.value)
    assert "3 PyTorch op(s)" in message  # histc, _fft_r2c and its complex64 result
    assert "aten.histc.default: histc, histc_1" in message and "aten._fft_r2c.default" in message


def test_training_batch_norm_is_refused():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))  # training mode
    with pytest.warns(UserWarning, match="training mode"), pytest.raises(tk.UnsupportedOpError):
        tk.from_torch(model, (torch.randn(2, 3, 8, 8),))


def test_fully_masked_attention_row_is_zero():
    class Masked(torch.nn.Module):
        def forward(self, q, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    q, mask = torch.randn(1, 2, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    program, expected = imported(Masked().eval(), (q, mask))
    assert_close(program(q, mask), expected)
    assert not np.isnan(program(q, mask).numpy()).any()


def test_output_structure_is_kept():
    class Pair(torch.nn.Module):
        def forward(self, x):
            return {"double": x * 2, "parts": (x + 1, x.sum())}

    out = tk.from_torch(Pair().eval(), (torch.ones(2, 3),))(np.ones((2, 3), np.float32))
    assert set(out) == {"double", "parts"} and isinstance(out["parts"], tuple)
    np.testing.assert_allclose(out["parts"][1].numpy(), 6.0)


def test_lowering_table_covers_the_core_ops():
    aten = torch.ops.aten
    for op in (aten.convolution.default, aten.addmm.default, aten.bmm.default, aten._softmax.default,
               aten.native_layer_norm.default, aten._native_batch_norm_legit_no_training.default,
               aten.max_pool2d_with_indices.default, aten.avg_pool2d.default, aten.mean.dim,
               aten._scaled_dot_product_flash_attention_for_cpu.default, aten.embedding.default,
               aten.where.self, aten._to_copy.default, aten.var.correction, aten.gelu.default):
        assert op in LOWERINGS, op


def test_fused_attention_lowerings_match_pytorch():
    """The fused SDPA overloads (kept by custom decomposition tables) lowered eagerly, masked rows included."""
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g) for _ in range(3))
    mask = torch.rand(4, 4, generator=g) > 0.4
    mask[2] = False
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tq, tk_, tv, tmask = (tk.tensor(t.numpy()) for t in (q, k, v, mask))
    out, _ = LOWERINGS[aten._scaled_dot_product_flash_attention_for_cpu.default].fn(tq, tk_, tv, attn_mask=tmask)
    assert_close(out, expected)
    out = LOWERINGS[aten.scaled_dot_product_attention.default].fn(tq, tk_, tv, tmask)
    assert_close(out, expected)


class PrivateInPlace(torch.nn.Module):
    """In-place ops on intermediates nothing else reads: converted without decomposing."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        out = self.bn(self.conv(x))
        out += x.mean(1, keepdim=True)
        return torch.flatten(out.relu_(), 1)


class SharedInPlace(torch.nn.Module):
    """In-place ops whose effect other nodes see: through an alias, or on a view of another tensor."""

    def forward(self, x):
        a = x * 2
        b = a.relu_()          # a and b are the same tensor
        c = x + 1
        c[0].add_(5)           # writes through a view into c
        return a + b + c


def test_private_in_place_ops_convert_without_decomposition(monkeypatch):
    torch.manual_seed(0)
    model, x = PrivateInPlace().eval(), torch.randn(2, 3, 6, 6)

    def refuse(*args, **kwargs):
        raise AssertionError("decomposed although every op converts directly")
    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    program, expected = imported(model, (x,))
    assert_close(program(x), expected)


def test_shared_in_place_updates_are_decomposed_first():
    x = torch.randn(3, 4)
    exported = torch.export.export(SharedInPlace().eval(), (x,))
    from tensorkiln.importers.torch.convert import unsupported_nodes
    assert any("updates a graph input or a tensor other nodes read" in op for op in unsupported_nodes(exported.graph))
    program, expected = imported(SharedInPlace().eval(), (x,))
    assert_close(program(x), expected)


class _Cache:
    """A cache object torch.export cannot return (as transformers' DynamicCache)."""

    def __init__(self, keys):
        self.keys = [keys]


class CachingDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = type("Config", (), {"use_cache": True})()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, use_cache=None):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        y = self.proj(x)
        return (y, _Cache(y * 2)) if use_cache else (y,)


def test_an_unexportable_cache_is_exported_with_use_cache_false():
    model, x = CachingDecoder().eval(), torch.randn(2, 4)
    with pytest.warns(UserWarning, match="use_cache=False"):
        program = tk.from_torch(model, (x,))
    (actual,) = program(x)
    with torch.no_grad():
        np.testing.assert_allclose(actual.numpy(), model(x, use_cache=False)[0].numpy(), rtol=1e-5, atol=1e-6)


def test_an_unexportable_output_keeps_torchs_error_with_a_hint():
    model = CachingDecoder().eval()
    with pytest.raises(RuntimeError, match="not a known type") as info:
        tk.from_torch(model, (torch.randn(2, 4),), {"use_cache": True})
    assert any("use_cache=False" in note for note in getattr(info.value, "__notes__", []))
