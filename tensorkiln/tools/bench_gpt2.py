"""GPT-2 small in `tensorkiln bench`: prefill of a 128-token prompt, then one decoded token.

tensorkiln runs its own GPT-2 (tensorkiln.models) with the PyTorch reference
model's weights: `prefill` fills a KV cache sized for the prompt plus the
tokens to come, `decode_step` (its caches donated to the compiled step)
writes one token's keys and values into them in place. The peers run the PyTorch
reference (torch_reference.GPT2), whose decode step concatenates the cache:

- torch: eager, prefill `model(ids)` and decode `model(next_id, presents, 128)`;
  and the decode step with a static cache (preallocated, written in place, as
  tensorkiln's), eager and through torch.compile;
- torch.compile: the same two calls through `torch.compile(dynamic=False)`, and
  with freezing and max-autotune (torch.compile-max);
- onnxruntime (IOBinding), openvino (its defaults: bf16 where the CPU has
  AVX512-BF16) and openvino-f32: the prefill and the decode step exported
  separately with torch.onnx.export (the decode graph takes the 24 cache
  tensors as inputs).

Every row's logits are compared with PyTorch eager's for the same step.
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

import numpy as np

from ..frontend.autodiff import no_grad
from ..frontend.creation import tensor
from ..frontend.jit import jit
from ..models import GPT2Config, GPT2LMHeadModel
from .bench_common import (ONNX_FILE_PEERS, agreement, compile_max_autotune, onnx_peers, tensorkiln_held_to,
                           timed_first)
from .timing import Timer, interleaved_medians

GPT2_PROMPT, GPT2_NEW_TOKENS = 128, 16
def _onnx_files(reference, ids, next_ids, presents) -> dict[str, tuple[str, list[np.ndarray]]]:
    """The reference's prefill and decode step exported to ONNX separately: step -> (path, input arrays)."""
    import torch  # optional dependency: the reference model

    class Prefill(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids)[0]

    class Decode(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids, *cache):
            past = [(cache[2 * i], cache[2 * i + 1]) for i in range(len(cache) // 2)]
            return self.model(ids, past, GPT2_PROMPT)[0]

    folder = tempfile.mkdtemp(prefix="tensorkiln-bench-gpt2-")
    flat = [t for pair in presents for t in pair]
    files = {}
    for name, module, args in (("prefill", Prefill(reference), (ids,)), ("decode", Decode(reference),
                                                                        (next_ids, *flat))):
        path = os.path.join(folder, f"gpt2_{name}.onnx")
        torch.onnx.export(module, args, path, dynamo=False)
        files[name] = (path, [a.numpy() for a in args])
    return files


def _record_tensorkiln(ours, ids, next_ids, length: int, precision: str,
                       record: Callable[[str, Callable, float], None]) -> None:
    """Compile tensorkiln's prefill and decode step at `precision`; record(step, run, compile seconds)."""
    # Inference, as for PyTorch: under no_grad the weights are constants of the compiled graphs.
    with no_grad():
        start = time.perf_counter()
        # the decode step writes its token's keys and values into the caches in place (donated)
        prefill = jit(ours.prefill, precision=precision)
        step = jit(ours.decode_step, donate_argnums=2, precision=precision)
        _, caches = prefill(tensor(ids.numpy()), length)
        token, position = tensor(next_ids.numpy()), tensor(np.int64(GPT2_PROMPT))
        step(token, position, caches)
        compile_s = time.perf_counter() - start
        record("prefill", lambda: prefill(tensor(ids.numpy()), length)[0], compile_s)
        # each timed call writes the same token at position 128 of the caches: the same result every time
        record("decode", lambda: step(token, position, caches)[0], 0.0)


def measure_gpt2(batch: int, peers: list[str], repeat: int, progress: Callable[[str], None] = lambda m: None,
                 config=None, rounds: int = 5, timer: Timer = interleaved_medians,
                 precision: str = "fp32") -> tuple[dict, dict]:
    """(prefill rows, decode rows): framework -> latency, compile time, agreement with PyTorch.

    Each step's frameworks are timed in turns (by `timer`: timing.interleaved_medians).
    `config` (a GPT2Config) shrinks the model for tests; default GPT-2 small. tensorkiln computes at
    `precision`; at "bf16" its fp32 compile is measured too ("tensorkiln-fp32").
    """
    import torch  # optional dependency: the reference model and its weights
    from . import torch_reference as ref  # imports torch
    config = config or GPT2Config()
    torch.manual_seed(0)
    reference = ref.GPT2(config.vocab_size, config.n_positions, config.n_embd, config.n_layer, config.n_head).eval()
    ours = GPT2LMHeadModel(config)
    ours.load_hf_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    ours.eval()
    ids = torch.randint(0, config.vocab_size, (batch, GPT2_PROMPT), generator=torch.Generator().manual_seed(1))
    length = GPT2_PROMPT + GPT2_NEW_TOKENS
    with torch.no_grad():
        want_prefill, presents = reference(ids)
        next_ids = want_prefill[:, -1].argmax(-1).reshape(-1, 1)
        want_decode = reference(next_ids, presents, GPT2_PROMPT)[0].numpy()
        want_prefill = want_prefill.numpy()
    steps = {"prefill": ({}, {}, want_prefill), "decode": ({}, {}, want_decode)}  # (rows, runs, expected)

    def record(step: str, framework: str, run: Callable, compile_s: float) -> None:
        rows, runs, want = steps[step]
        held_to = tensorkiln_held_to(precision) if framework == "tensorkiln" else framework
        rows[framework] = {"compile_s": compile_s, **agreement(run(), want, held_to)}
        runs[framework] = run

    ours_at = (("tensorkiln", precision),) + ((("tensorkiln-fp32", "fp32"),) if precision != "fp32" else ())
    for framework, at in ours_at:
        progress(f"gpt2: compiling tensorkiln ({at}) prefill and decode step")
        _record_tensorkiln(ours, ids, next_ids, length, at, lambda s, run, c, f=framework: record(s, f, run, c))
    with torch.no_grad():
        # a static cache, as tensorkiln's: preallocated for the prompt and the new tokens, written in place
        static = [tuple(torch.cat([c, c.new_zeros(c.shape[:2] + (GPT2_NEW_TOKENS,) + c.shape[3:])], 2)
                        for c in pair) for pair in presents]
        if "torch" in peers:
            record("prefill", "torch", lambda: reference(ids)[0], 0.0)
            record("decode", "torch", lambda: reference(next_ids, presents, GPT2_PROMPT)[0], 0.0)
            record("decode", "torch static cache",
                   lambda: reference.decode_static(next_ids, static, GPT2_PROMPT), 0.0)
        if "torch.compile-max" in peers:
            progress("gpt2: compiling torch.compile with freezing and max-autotune")
            fastest = compile_max_autotune(reference)
            record("prefill", "torch.compile-max", lambda: fastest(ids)[0], timed_first(lambda: fastest(ids)))
            first = timed_first(lambda: fastest(next_ids, presents, GPT2_PROMPT))
            record("decode", "torch.compile-max", lambda: fastest(next_ids, presents, GPT2_PROMPT)[0], first)
        if "torch.compile" in peers:
            progress("gpt2: compiling torch.compile")
            fast = torch.compile(reference, dynamic=False)
            record("prefill", "torch.compile", lambda: fast(ids)[0], timed_first(lambda: fast(ids)))
            first = timed_first(lambda: fast(next_ids, presents, GPT2_PROMPT))
            record("decode", "torch.compile", lambda: fast(next_ids, presents, GPT2_PROMPT)[0], first)
            fast_static = torch.compile(reference.decode_static, dynamic=False)
            first = timed_first(lambda: fast_static(next_ids, static, GPT2_PROMPT))
            record("decode", "torch.compile static cache", lambda: fast_static(next_ids, static, GPT2_PROMPT), first)
    onnx_file = [p for p in peers if p in ONNX_FILE_PEERS]
    if onnx_file:
        progress(f"gpt2: exporting prefill and decode to ONNX for {', '.join(onnx_file)}")
        for step_name, (path, arrays) in _onnx_files(reference, ids, next_ids, presents).items():
            onnx_peers(path, arrays, peers, progress,
                       lambda framework, run, seconds, s=step_name: record(s, framework, run, seconds))
    for name, (rows, runs, _) in steps.items():
        progress(f"gpt2: measuring {name}: {', '.join(runs)} in turns")
        with no_grad(), torch.no_grad():
            for framework, latency in timer(runs, repeat, rounds).items():
                rows[framework]["latency_s"] = latency
    return steps["prefill"][0], steps["decode"][0]
