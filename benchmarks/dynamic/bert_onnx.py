"""BERT-base as one ONNX file with dim_param batch and sequence axes: tensorkiln (tk.onnx.load, size
symbols) against ONNX Runtime on the same file (dynamic_bert.py's `onnx` part)."""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

import tensorkiln as tk
from benchmarks.common import print_table
from benchmarks.dynamic.ort_peer import bound_runner, ort_session
from tensorkiln.tools.timing import alternating_blocks

VOCAB, MAX_POSITIONS = 30522, 512
TOLERANCE = 1e-4  # max |difference| relative to the largest |logit|
EXTRA_BATCHES = (2, 3, 5)  # called at one length each, after the batch-1 lengths: the batch axis symbolic too


def export_bert(folder: str, layers: int = 12) -> str:
    """The reference BERT-base encoder (`layers` layers) as ONNX, input_ids and attention_mask (batch, seq)
    dim_params."""
    import torch
    from tensorkiln.tools import torch_reference as ref
    torch.manual_seed(0)
    model = ref.BertEncoder(vocab=VOCAB, hidden=768, layers=layers, heads=12, intermediate=3072,
                            max_positions=MAX_POSITIONS, num_classes=2).eval()
    ids, mask = inputs(2, 16)
    path = os.path.join(folder, f"bert_{layers}.onnx")
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(model, (torch.from_numpy(ids), torch.from_numpy(mask)), path, dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch"}})
    return path


def inputs(batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """Random tokens and a mask with the last sequence's final quarter padded."""
    rng = np.random.default_rng(seq * 7 + batch)
    ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[-1, seq - seq // 4:] = 0
    return ids, mask


def onnx_part(lengths: list[int], samples: list[int], pairs: int) -> dict:
    """Programs over `lengths` (batch 1) and EXTRA_BATCHES; at each of `samples`, per-call time against
    a program compiled from the same model exported at that length (every size fixed) and against ORT."""
    folder = tempfile.mkdtemp(prefix="tk-bert-onnx-")
    path = export_bert(folder)
    model = tk.onnx.load(path)
    start = time.perf_counter()
    for n in lengths:
        model(*inputs(1, n))
    for b in EXTRA_BATCHES:
        model(*inputs(b, 64))
    seconds = time.perf_counter() - start
    print(f"\nonnx: {len(lengths)} lengths in [2, 512] at batch 1, then batch {EXTRA_BATCHES} at 64: "
          f"{model.compile_count} programs, {seconds:.1f} s for all calls (compiling included)")
    results = {"programs": model.compile_count, "seconds": seconds, "samples": {}}
    session = ort_session(path)
    rows = []
    for n in samples:
        ids, mask = inputs(1, n)
        ort_run, (want,) = bound_runner(session, {"input_ids": ids, "attention_mask": mask})
        ort_run()
        got = np.asarray(model(ids, mask))
        error = float(np.abs(got - want).max() / np.abs(want).max())
        assert error < TOLERANCE, f"seq {n}: tensorkiln and ONNX Runtime differ by {error:.2e}"
        specialized = tk.onnx.load(export_static(folder, 12, ids, mask))
        specialized(ids, mask)
        times = alternating_blocks({"tensorkiln": lambda: model(ids, mask), "ort": ort_run,
                                    "specialized": lambda: specialized(ids, mask)}, pairs=pairs)
        del specialized
        med = {k: float(np.median(v)) for k, v in times.items()}
        pair_ratios = [a / b for a, b in zip(times["tensorkiln"], times["ort"])]
        ratio = float(np.median(pair_ratios))
        versus_specialized = float(np.median([a / b for a, b in zip(times["tensorkiln"], times["specialized"])]))
        ahead = sum(r < 1.0 for r in pair_ratios)
        rows.append([str(n), f"{med['tensorkiln'] * 1e3:.2f}", f"{med['specialized'] * 1e3:.2f}",
                     f"{med['ort'] * 1e3:.2f}", f"{versus_specialized:.3f}", f"{ratio:.3f}",
                     f"{med['tensorkiln'] / med['ort']:.3f}", f"{ahead} of {len(pair_ratios)}", f"{error:.1e}"])
        results["samples"][str(n)] = {"tensorkiln_s": med["tensorkiln"], "specialized_s": med["specialized"],
                                      "ort_s": med["ort"], "tensorkiln_over_specialized": versus_specialized,
                                      "tensorkiln_over_ort": ratio, "pair_ratios": pair_ratios,
                                      "relative_error": error}
    # the median of the pairs' ratios is the figure (each pair saw one phase of the machine); the ratio
    # of the medians and the pairs tensorkiln won say whether the drift could have made it
    print_table(["seq", "tensorkiln (symbolic) ms", "specialized ms", "ONNX Runtime ms",
                 "symbolic / specialized", "tensorkiln / ORT (median of pairs)", "ratio of medians",
                 "pairs ahead", "rel. error"], rows)
    return results


def kernels_part(layers: int, seq: int, rounds: int) -> dict:
    """Per-kernel times of the imported program with symbolic sizes against the same model exported
    with every size fixed (specialized), at batch 1 and length `seq`: `profile` in `rounds` turns."""
    folder = tempfile.mkdtemp(prefix="tk-bert-kernels-")
    ids, mask = inputs(1, seq)
    static = export_static(folder, layers, ids, mask)
    models = {"symbolic": tk.onnx.load(export_bert(folder, layers)), "specialized": tk.onnx.load(static)}
    for model in models.values():
        model(ids, mask)
    models["symbolic"](*inputs(1, seq + 3))  # a second length: the symbolic program serves both
    times: dict[str, dict[str, list[float]]] = {name: {} for name in models}
    for round_index in range(rounds):
        for name in (list(models) if round_index % 2 == 0 else list(models)[::-1]):
            for line in str(models[name].profile(ids, mask, repeat=40)).splitlines()[2:]:
                kernel, ms = line.split()[0], float(line.split()[3])
                times[name].setdefault(kernel, []).append(ms)
    rows = []
    for a, b in zip(*(sorted(t, key=lambda k: int(k[1:].split("_")[0])) for t in times.values())):
        rows.append([a, f"{np.median(times['symbolic'][a]):.3f}", b, f"{np.median(times['specialized'][b]):.3f}"])
    print(f"\nkernels of the imported BERT, {layers} layers, batch 1, length {seq} ({models['symbolic'].compile_count}"
          f" symbolic program for 2 lengths): ms per call, medians of {rounds} rounds")
    print_table(["symbolic kernel", "ms", "specialized kernel", "ms"], rows)
    return {name: {k: float(np.median(v)) for k, v in t.items()} for name, t in times.items()}


def export_static(folder: str, layers: int, ids: np.ndarray, mask: np.ndarray) -> str:
    """The reference encoder exported with every size fixed at `ids`'s."""
    import torch
    from tensorkiln.tools import torch_reference as ref
    torch.manual_seed(0)
    model = ref.BertEncoder(vocab=VOCAB, hidden=768, layers=layers, heads=12, intermediate=3072,
                            max_positions=MAX_POSITIONS, num_classes=2).eval()
    path = os.path.join(folder, f"bert_{layers}_static_{ids.shape[1]}.onnx")
    torch.onnx.export(model, (torch.from_numpy(ids), torch.from_numpy(mask)), path, dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"])
    return path
