"""Greedy GPT-2 generation with symbolic lengths, tensorkiln against ONNX Runtime (dynamic_gpt2.py's
`generate` part).

tensorkiln: one program for the prefill of every prompt length (`input_ids` axis 1 the symbol
"seq"; it returns the last position's logits and the KV caches sized for the prompt plus the new
tokens) and one for the decode step (every cache's length axis the symbol "kv"; the caches donated,
written in place). ONNX Runtime: the PyTorch reference model's prefill and decode step exported with
torch.onnx.export, their lengths dim_param axes ("seq"; the decode graph's caches "past", its
position read from the cache's length), run with IOBinding (the caches stay ORT values from step to
step), 2 intra-op threads, all graph optimizations. Both return the last position's logits only and
take argmax in numpy, so each generation does the same work outside the graphs.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import tensorkiln as tk
from benchmarks.common import print_table
from benchmarks.dynamic.ort_peer import ort_session
from tensorkiln.tools.timing import alternating_blocks

NEW_TOKENS = 32


class TensorkilnGenerator:
    """Symbolic prefill and decode step of tensorkiln's GPT-2; `compile_counts()` -> (prefill, decode)."""

    def __init__(self, model, new_tokens: int = NEW_TOKENS):
        config = model.config
        self.model, self.new_tokens = model, new_tokens

        def prefill(input_ids):
            logits, caches = model.prefill(input_ids, input_ids.shape[1] + new_tokens)
            return logits[:, -1], caches
        kv = tk.Dim("kv", max=config.n_positions)
        self.prefill = tk.jit(prefill, dynamic={"input_ids": {1: tk.Dim("seq", max=config.n_positions)}})
        self.step = tk.jit(model.decode_step, donate_argnums=2,
                           dynamic={f"caches_{i}": {2: kv} for i in range(2 * config.n_layer)})

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """The prompt followed by `new_tokens` greedy tokens."""
        with tk.no_grad():
            logits, caches = self.prefill(tk.tensor(ids))
            token = logits.numpy().argmax(-1).reshape(-1, 1)
            tokens = [ids, token]
            for i in range(self.new_tokens - 1):
                logits, caches = self.step(tk.tensor(token), tk.tensor(np.int64(ids.shape[1] + i)), caches)
                token = logits.numpy()[:, -1].argmax(-1).reshape(-1, 1)
                tokens.append(token)
        return np.concatenate(tokens, axis=1)

    def compile_counts(self) -> tuple[int, int]:
        return self.prefill.compile_count, self.step.compile_count


def export_onnx(reference, layers: int, folder: str) -> tuple[str, str]:
    """The reference model's prefill and decode step as ONNX files with dim_param lengths: (prefill, decode)."""
    import torch

    class Prefill(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            logits, presents = self.model(ids)
            return (logits[:, -1], *[t for pair in presents for t in pair])

    class Decode(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids, *cache):
            past = [(cache[2 * i], cache[2 * i + 1]) for i in range(len(cache) // 2)]
            logits, presents = self.model(ids, past, cache[0].shape[2])  # the position: the past's length
            return (logits[:, -1], *[t for pair in presents for t in pair])

    caches = [f"cache_{i}" for i in range(2 * layers)]
    presents = [f"present_{i}" for i in range(2 * layers)]
    ids = torch.zeros((1, 8), dtype=torch.int64)
    with torch.no_grad():
        _, past = reference(ids)
    prefill, decode = os.path.join(folder, "gpt2_prefill.onnx"), os.path.join(folder, "gpt2_decode.onnx")
    torch.onnx.export(Prefill(reference), (ids,), prefill, dynamo=False, input_names=["input_ids"],
                      output_names=["logits", *presents],
                      dynamic_axes={"input_ids": {1: "seq"}, **{p: {2: "seq"} for p in presents}})
    torch.onnx.export(Decode(reference), (ids[:, :1], *[t for pair in past for t in pair]), decode, dynamo=False,
                      input_names=["input_ids", *caches], output_names=["logits", *presents],
                      dynamic_axes={**{c: {2: "past"} for c in caches}, **{p: {2: "total"} for p in presents}})
    return prefill, decode


class OrtGenerator:
    """ONNX Runtime generating with the exported prefill and decode graphs, IOBinding throughout."""

    def __init__(self, prefill_path: str, decode_path: str, new_tokens: int = NEW_TOKENS):
        self.prefill, self.decode = ort_session(prefill_path), ort_session(decode_path)
        self.cache_names = [i.name for i in self.decode.get_inputs()[1:]]
        self.new_tokens = new_tokens

    @staticmethod
    def _run(session, binding):
        for output in session.get_outputs():
            binding.bind_output(output.name, "cpu")
        session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        return outputs[0].numpy(), outputs[1:]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        binding = self.prefill.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        logits, caches = self._run(self.prefill, binding)
        token = logits.argmax(-1).reshape(-1, 1)
        tokens = [ids, token]
        for _ in range(self.new_tokens - 1):
            binding = self.decode.io_binding()
            binding.bind_cpu_input("input_ids", token)
            for name, cache in zip(self.cache_names, caches):
                binding.bind_ortvalue_input(name, cache)
            logits, caches = self._run(self.decode, binding)
            token = logits.argmax(-1).reshape(-1, 1)
            tokens.append(token)
        return np.concatenate(tokens, axis=1)


def generate_part(ours, reference, prompts: list[int], pairs: int,
                  timed: list[int] | None = None) -> tuple[dict, list[list[str]]]:
    """Generate NEW_TOKENS after each prompt length with both; programs compiled, tokens/s in turns at
    the `timed` prompt lengths (default: every one), each row printed as it is measured."""
    config = ours.config
    ours_generate = TensorkilnGenerator(ours)
    start = time.perf_counter()
    prompt_ids = {n: np.random.default_rng(n).integers(0, config.vocab_size, (1, n)).astype(np.int64) for n in prompts}
    generated = {n: ours_generate(ids) for n, ids in prompt_ids.items()}
    seconds = time.perf_counter() - start
    prefills, decodes = ours_generate.compile_counts()
    print(f"\ngenerate: {NEW_TOKENS} tokens after {len(prompts)} prompt lengths in [{min(prompts)}, {max(prompts)}]: "
          f"{prefills} prefill and {decodes} decode programs, {seconds:.1f} s for all (compiling included)")
    folder = tempfile.mkdtemp(prefix="tk-gpt2-onnx-")
    theirs = OrtGenerator(*export_onnx(reference, config.n_layer, folder))
    result = {"prompts": prompts, "prefill_programs": prefills, "decode_programs": decodes, "seconds": seconds,
              "new_tokens": NEW_TOKENS, "samples": {}}
    rows = []
    for n in sorted(timed or prompts):
        ids = prompt_ids.get(n)
        if ids is None:
            ids = prompt_ids[n] = np.random.default_rng(n).integers(0, config.vocab_size, (1, n)).astype(np.int64)
            generated[n] = ours_generate(ids)
        same = int((theirs(ids)[:, n:] == generated[n][:, n:]).sum())
        times = alternating_blocks({"tensorkiln": lambda: ours_generate(ids), "ort": lambda: theirs(ids)},
                                   pairs=pairs)
        med = {k: float(np.median(v)) for k, v in times.items()}
        speedup = float(np.median([o / t for t, o in zip(times["tensorkiln"], times["ort"])]))
        rows.append([str(n), f"{NEW_TOKENS / med['tensorkiln']:.1f}", f"{NEW_TOKENS / med['ort']:.1f}",
                     f"{speedup:.3f}", f"{same}/{NEW_TOKENS}"])
        print("  prompt {}: tensorkiln {} tokens/s, ORT {} tokens/s, ratio {}, same tokens {}".format(*rows[-1]),
              flush=True)
        result["samples"][str(n)] = {"tensorkiln_s": med["tensorkiln"], "ort_s": med["ort"],
                                     "tokens_per_s_over_ort": speedup, "same_tokens": same}
    return result, rows


def print_generate_table(rows: list[list[str]]) -> None:
    print()
    print_table(["prompt", "tensorkiln tokens/s", "ORT tokens/s", "tensorkiln / ORT tokens/s",
                 "same tokens as ORT"], rows)
