"""Two-output kernels (kernels/companion.py): a value read unrounded by one op and rounded to bf16 by a
convolution is stored, with its rounding, by the kernel that computes it; no kernel only rounds, and
the results stay those of the bf16 reference interpreter.

The structural checks run on a target without bf16 dot products (the `no_bf16_dot` fixture: this host,
or any host told so), where the roundings are float32 values; the numerical ones on the host's own
target too."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import nn
from tensorkiln.kernels.companion import with_companion_stores, writes_only_by_stores
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import For, Kernel, NativeCall, Pointer, Store, block
from tensorkiln.models.mobilenet import InvertedResidual
from tensorkiln.models.resnet import BasicBlock

RNG = np.random.default_rng(19)
SECOND_OUTPUT = "(a second output of this kernel)"
TOLERANCE = 2.0 ** -8  # float32 sums in another order may tip a bf16 rounding of an intermediate


def kernel_ops(f, *args) -> list[list[str]]:
    """The ops of each kernel's graph nodes."""
    return [[line.split("=", 1)[-1].strip().split("(")[0] for line in k.nodes] for k in f.report(*args).kernels]


def second_outputs(f, *args) -> int:
    """How many kernels also store a rounding of their output."""
    return sum(any(SECOND_OUTPUT in line for line in k.nodes) for k in f.report(*args).kernels)


def relative_error(a: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(a - reference) / max(np.linalg.norm(reference), 1e-30))


def compiled_and_reference(model, x: np.ndarray) -> tuple[tk.jit, np.ndarray, np.ndarray]:
    model.eval()
    with tk.no_grad():
        f = tk.jit(model, precision="bf16")
        out = f(x).numpy()
        reference = tk.jit(model, precision="bf16", backend="interpreter")(x).numpy()
    return f, out, reference


def randomized(model):
    """`model` with random batch-norm statistics, so its layers do not start as identities."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            c = module.num_features
            module.running_mean.data = tk.tensor(RNG.standard_normal(c).astype(np.float32) * 0.1)
            module.running_var.data = tk.tensor(RNG.uniform(0.5, 1.5, c).astype(np.float32))
    return model


def no_rounding_kernel(ops: list[list[str]]) -> bool:
    return not [o for o in ops if set(o) <= {"cast", "round_bf16", "reshape", "permute"}]


# (input channels, expansion, height, width): odd channel counts and planes next to blocked ones
INVERTED_RESIDUALS = [(24, 6, 14, 14), (16, 6, 9, 11), (13, 3, 9, 11), (8, 6, 7, 5), (7, 1, 5, 9)]


@pytest.mark.parametrize("channels,expand,h,w", INVERTED_RESIDUALS)
def test_inverted_residual_blocks_without_rounding_kernels(no_bf16_dot, channels, expand, h, w):
    """MobileNetV2's blocks: each block's output is read by the next residual add and, rounded, by the
    next 1x1 convolution; the projection that computes it stores the rounding too."""
    tk.manual_seed(channels)
    model = randomized(nn.Sequential(*(InvertedResidual(channels, channels, 1, expand) for _ in range(3))))
    x = RNG.standard_normal((1, channels, h, w)).astype(np.float32)
    f, out, reference = compiled_and_reference(model, x)
    assert no_rounding_kernel(kernel_ops(f, x)), "a kernel that only rounds"
    if any("conv2d_nchwc" in ops for ops in kernel_ops(f, x)):  # blocked layers read their input in place
        assert second_outputs(f, x) >= 1
    assert relative_error(out, reference) < TOLERANCE


# (channels, height, width, first stride)
BASIC_BLOCKS = [(16, 10, 10, 1), (11, 9, 7, 2), (32, 5, 5, 1)]


@pytest.mark.parametrize("channels,h,w,stride", BASIC_BLOCKS)
def test_basic_blocks_without_rounding_kernels(no_bf16_dot, channels, h, w, stride):
    """ResNet-18's blocks: a block's output (its residual add and ReLU) is read by the next block's
    shortcut and, rounded, by its first convolution."""
    tk.manual_seed(channels)
    model = randomized(nn.Sequential(BasicBlock(channels // 2 + 1, channels, stride), BasicBlock(channels, channels),
                                     BasicBlock(channels, channels)))
    x = RNG.standard_normal((1, channels // 2 + 1, h, w)).astype(np.float32)
    f, out, reference = compiled_and_reference(model, x)
    assert no_rounding_kernel(kernel_ops(f, x)), "a kernel that only rounds"
    assert relative_error(out, reference) < TOLERANCE


@pytest.mark.parametrize("seed", range(6))
def test_random_convolution_graphs_against_the_reference(seed, request):
    """Random chains of convolutions (1x1 and 3x3), activations and residual adds of earlier values, each
    value read by any later op: on the host's target and on one without bf16 dot products."""
    rng = np.random.default_rng(seed)
    channels = int(rng.choice([5, 8, 12, 16]))
    h, w = int(rng.integers(3, 12)), int(rng.integers(3, 12))
    layers = int(rng.integers(2, 6))
    weights = [(rng.standard_normal((channels, channels, k, k)) / (channels * k)).astype(np.float32)
               for k in rng.choice([1, 3], layers)]
    biases = [rng.standard_normal(channels).astype(np.float32) * 0.1 for _ in range(layers)]
    plan = [(int(rng.integers(0, i + 1)), rng.choice(["relu", "none", "relu6"]), bool(rng.integers(0, 2)),
             int(rng.integers(0, i + 1))) for i in range(layers)]

    def fn(x):
        values = [x]
        for (source, activation, residual, other), weight, bias in zip(plan, weights, biases):
            k = weight.shape[-1]
            y = F.conv2d(values[source], tk.tensor(weight), tk.tensor(bias), padding=k // 2)
            y = y.relu() if activation == "relu" else (F.relu6(y) if activation == "relu6" else y)
            values.append(y + values[other] if residual else y)
        return values[-1] + values[len(values) // 2]

    x = rng.standard_normal((1, channels, h, w)).astype(np.float32)
    reference = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
    assert relative_error(tk.jit(fn, precision="bf16")(x).numpy(), reference) < TOLERANCE
    request.getfixturevalue("no_bf16_dot")
    f = tk.jit(fn, precision="bf16")
    assert relative_error(f(x).numpy(), reference) < TOLERANCE
    assert no_rounding_kernel(kernel_ops(f, x)), "a kernel that only rounds"


def _store_kernel(extra=None) -> tuple[Kernel, Buffer, Buffer]:
    out, src = Buffer("out", "float32", (8,)), Buffer("src", "float32", (8,))
    i = E.Var("i")
    body = block(For(i, E.const(8), Store(out, i, E.Const(1.0, "float32"))),
                 For(i, E.const(8), Store(out, i, E.Load(out, i) + E.Load(src, i))), *([extra] if extra else []))
    return Kernel("k", (out, src), body), out, Buffer("rounded", "float32", (8,))


def test_every_store_of_the_output_is_followed_by_its_rounding():
    kernel, out, rounded = _store_kernel()
    two = with_companion_stores(kernel, out, rounded, lambda v: E.call("round_bf16", v), "comment")
    stores = [str(s) for s in (two.body.stmts if hasattr(two.body, "stmts") else [two.body])]
    assert len(stores) == 2 and all("rounded[" in s for s in stores)  # the last store decides, whichever it is
    assert two.params[-1] is rounded and two.comment == "comment"


def test_an_output_written_by_a_helper_keeps_its_rounding_kernel():
    """A native helper writes through a pointer the loop IR cannot follow: no second output."""
    out = Buffer("out", "float32", (8,))
    kernel, out, rounded = _store_kernel(NativeCall("tk_helper", (Pointer(out, E.const(0)),), ("out",)))
    assert not writes_only_by_stores(kernel, out)
    assert with_companion_stores(kernel, out, rounded, lambda v: v, "") is None
