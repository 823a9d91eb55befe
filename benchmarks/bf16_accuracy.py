"""precision="bf16" against fp32 on the zoo's full-size models: the logits' relative error, and how
many kernels compute in each precision.

    python benchmarks/bf16_accuracy.py [--models resnet18,mobilenetv2,bert,gpt2] [--json out/bf16_accuracy.json]

Models at their real size with seeded random weights (no downloads): ResNet-18 and MobileNetV2 at
224x224 with 1000 classes, their convolution weights drawn ~ N(0, 1.5 / fan_in) so the signal
neither vanishes nor explodes through 20-50 layers (with the modules' default initialisation
MobileNetV2's logits are its classifier's bias alone); BERT-base and GPT-2 small on 128 tokens
(GPT-2: the prefill's logits). The error is ||bf16 - fp32|| / ||fp32|| over all logits, and the
largest |bf16 - fp32| over the largest |fp32|; the goal is below 2e-2 (tests/models/test_zoo_bf16.py
checks small configurations of the same models in every test run).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
from tensorkiln import models  # noqa: E402

from common import write_json  # noqa: E402

GOAL = 2e-2


def signal_preserving(model):
    """`model` with its convolution weights redrawn ~ N(0, 1.5 / fan_in)."""
    rng = np.random.default_rng(1)
    state = {}
    for name, value in model.state_dict().items():
        array = value.numpy()
        if name.endswith("weight") and array.ndim == 4:
            array = (rng.standard_normal(array.shape) * np.sqrt(1.5 / np.prod(array.shape[1:]))).astype(np.float32)
        state[name] = array
    model.load_state_dict(state)
    return model


def build(name: str):
    """(model in eval mode, example input)."""
    rng = np.random.default_rng(0)
    tk.manual_seed(0)
    if name == "resnet18":
        model, x = signal_preserving(models.ResNet18()), rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    elif name == "mobilenetv2":
        model, x = signal_preserving(models.MobileNetV2()), rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    elif name == "bert":
        model, x = models.BertModel(models.BertConfig()), rng.integers(0, 30522, (1, 128))
    elif name == "gpt2":
        model, x = models.GPT2LMHeadModel(models.GPT2Config()), rng.integers(0, 50257, (1, 128))
    else:
        raise SystemExit(f"unknown model {name!r}")
    model.eval()
    return model, x


def measure(name: str) -> dict:
    model, x = build(name)
    with tk.no_grad():
        fp32 = tk.jit(model)(x).numpy().astype(np.float64)
        compiled = tk.jit(model, precision="bf16")
        bf16 = compiled(x).numpy().astype(np.float64)
        kernels = Counter(k.precision for k in compiled.report(x).kernels)
    return {"relative_error": float(np.linalg.norm(bf16 - fp32) / np.linalg.norm(fp32)),
            "max_error_over_max": float(np.abs(bf16 - fp32).max() / np.abs(fp32).max()),
            "kernels_by_precision": dict(kernels)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert,gpt2")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    print(f"{'model':<12} {'rel. error':>10} {'max/max':>9}  kernels by precision")
    for name in args.models.split(","):
        r = results[name] = measure(name)
        kernels = ", ".join(f"{k}: {v}" for k, v in sorted(r["kernels_by_precision"].items()))
        print(f"{name:<12} {r['relative_error']:10.2e} {r['max_error_over_max']:9.2e}  {kernels}", flush=True)
    if args.json:
        write_json(args.json, results)
    return 0 if all(r["relative_error"] < GOAL for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
