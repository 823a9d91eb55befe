"""precision="int8w" / "int4w" on GPT-2 (a small configuration, random weights): the prefill's and
the decode steps' logits close to float32 within each scheme's bound, every linear layer and the
head on the weight-only kernels. The full-size model is measured by benchmarks/weight_only.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import models
from tensorkiln.frontend.autodiff import no_grad

# every matmul weight at least passes/weight_only.MIN_WEIGHTS elements: the head is 64 x 100
SMALL_GPT2 = models.GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4)
# relative (Frobenius) error of the logits against float32, the worst of the prefill and the steps:
# measured 5.3e-3 for int8 per output channel and 8.2e-2 for int4 in groups of 32 (Q4_0)
BOUNDS = {"int8w": 2e-2, "int4w": 1.5e-1}
PROMPT, STEPS = 8, 4


def relative_error(a: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(a - reference) / np.linalg.norm(reference))


def decode(model, precision: str, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[str]]:
    """(prefill logits, each forced step's logits, the step's kernel precisions)."""
    with no_grad():
        prefill = tk.jit(model.prefill, precision=precision)
        step = tk.jit(model.decode_step, donate_argnums=2, precision=precision)
        logits, caches = prefill(tk.tensor(ids[:, :PROMPT]), PROMPT + STEPS)
        first = logits.numpy().copy()
        steps = []
        for i in range(STEPS):
            args = (tk.tensor(ids[:, PROMPT + i:PROMPT + i + 1]), tk.tensor(np.int64(PROMPT + i)))
            out, caches = step(*args, caches)
            steps.append(out.numpy().copy())
        kinds = [k.precision for k in step.report(*args, caches).kernels]
    return first, steps, kinds


@pytest.fixture(scope="module")
def model_and_fp32():
    tk.manual_seed(0)
    model = models.GPT2LMHeadModel(SMALL_GPT2).eval()
    ids = np.random.default_rng(0).integers(0, SMALL_GPT2.vocab_size, (1, PROMPT + STEPS))
    return model, ids, decode(model, "fp32", ids)


@pytest.mark.parametrize("precision", sorted(BOUNDS))
def test_gpt2_logits_close_to_fp32(model_and_fp32, precision):
    model, ids, (want_first, want_steps, _) = model_and_fp32
    first, steps, kinds = decode(model, precision, ids)
    errors = [relative_error(first, want_first)] + [relative_error(s, w) for s, w in zip(steps, want_steps)]
    assert max(errors) < BOUNDS[precision], errors
    assert 0 < max(errors)  # the weights really were quantized
    assert kinds.count(precision) == 4 * SMALL_GPT2.n_layer + 1  # four linear layers a block, and the head
