"""Hugging Face transformers models (small seeded configs) through tk.from_torch and torch.compile.

Each architecture runs through both import paths and is compared with eager
PyTorch (float32, every floating-point output). The default run checks one or
two architectures of each kind; TK_HF_MODELS=all (`make hf-models`) checks all
twenty, and greedy generate() with a dynamic cache too.
"""
from __future__ import annotations

import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install 'tensorkiln[torch]')")
pytest.importorskip("transformers", reason="needs transformers (pip install 'tensorkiln[hf]')")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import STATS  # noqa: E402
from tensorkiln.tools import hf_zoo  # noqa: E402

ALL = os.environ.get("TK_HF_MODELS") == "all"
DEFAULT = ("bert", "llama", "t5", "vit", "resnet", "whisper-encoder", "wav2vec2")
RTOL = 1e-4  # float32: measured errors are about 1e-7 of the largest output


def _architectures():
    return [pytest.param(name, marks=() if ALL or name in DEFAULT else
                         pytest.mark.skip(reason="TK_HF_MODELS=all (make hf-models) checks every architecture"))
            for name in hf_zoo.ARCHITECTURES]


@pytest.mark.parametrize("name", _architectures())
def test_architecture_matches_eager_through_both_paths(name):
    errors = hf_zoo.compare(name)
    print(f"{name}: max relative error {errors}")
    assert errors["from_torch"] <= RTOL and errors["torch.compile"] <= RTOL, errors


def test_from_torch_without_use_cache_retries_and_keeps_the_output_class():
    model, args, _ = hf_zoo.ARCHITECTURES["llama"].build()
    with pytest.warns(UserWarning, match="use_cache=False"):
        program = tk.from_torch(model, args)  # the decoder returns a DynamicCache torch.export cannot flatten
    out = program(*args)
    assert type(out).__name__ == "CausalLMOutputWithPast" and list(out.keys()) == ["logits"]
    with torch.no_grad():
        want = model(*args, use_cache=False).logits
    assert hf_zoo.max_relative_error([out.logits.numpy()], [want]) <= RTOL


def test_from_torch_refuses_other_values_of_a_specialized_flag():
    model, args, kwargs = hf_zoo.ARCHITECTURES["gpt2"].build()
    program = tk.from_torch(model, args, kwargs)  # use_cache=False is baked into the exported graph
    program(*args, **kwargs)
    with pytest.raises(ValueError, match="use_cache"):
        program(*args, use_cache=True)


def _generate_compiled(name: str, cache: str, new_tokens: int):
    model, args, _ = hf_zoo.ARCHITECTURES[name].build()
    settings = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if cache == "static":
        settings["cache_implementation"] = "static"
    with torch.no_grad():
        want = model.generate(args[0], **settings)
    torch._dynamo.reset()
    STATS.clear()
    model.forward = torch.compile(model.forward, backend="tensorkiln")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # transformers' notes on generation settings
        got = model.generate(args[0], **settings)
    return want, got, dict(STATS)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_greedy_generate_with_a_static_cache_compiles_the_decode_step_once(name):
    want, got, stats = _generate_compiled(name, "static", new_tokens=6)
    assert torch.equal(got, want), (got, want)
    # one compile for the prompt, one for the decode step that every later token reuses
    assert stats["compiles"] <= 2 and stats["tensorkiln_calls"] == 6 and stats.get("eager_calls", 0) == 0, stats


@pytest.mark.skipif(not ALL, reason="TK_HF_MODELS=all (make hf-models): a compile per generated token")
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_greedy_generate_with_a_dynamic_cache(name):
    want, got, stats = _generate_compiled(name, "dynamic", new_tokens=4)
    assert torch.equal(got, want), (got, want)
    assert stats["tensorkiln_calls"] == 4 and stats.get("eager_calls", 0) == 0, stats


@pytest.mark.parametrize("name", _architectures())
def test_bf16_through_from_torch_stays_within_two_percent(name):
    """precision="bf16" (bf16 operands, float32 sums): every output within 2e-2 of the float model's,
    relative to its largest value (docs/precision.md's accuracy goal)."""
    model, args, kwargs = hf_zoo.ARCHITECTURES[name].build()
    with torch.no_grad():
        want = hf_zoo.tensors_of(model(*args, **kwargs))
    program = tk.from_torch(model, args, kwargs, precision="bf16")
    got = hf_zoo.tensors_of(hf_zoo._as_torch(program(*args, **kwargs)))
    assert hf_zoo.max_relative_error([g.numpy() for g in got], want) <= 2e-2


@pytest.mark.parametrize("name", _architectures())
def test_int8_through_tk_quantize(name):
    """tk.quantize on the PyTorch model: its linear and convolution layers on the int8 kernels, the main
    output (hidden states, logits) within 5e-2 of the float model's largest value (measured 2e-4..3.2e-2
    with four calibration batches and 8.9e-2 for Llama with two, benchmarks/ptq_hf_models.py; BERT's 32-wide pooled output, a tanh of
    one token, moves more and is not held to it)."""
    model, args, kwargs = hf_zoo.ARCHITECTURES[name].build()
    calibration = hf_zoo.random_batches(args, kwargs, 8, 0)  # a static range from too few clips the test
    test = hf_zoo.random_batches(args, kwargs, 1, 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tk.quantize(model, calibration)
        got = hf_zoo.tensors_of(hf_zoo._as_torch(hf_zoo.call(program, test)))
    with torch.no_grad():
        want = hf_zoo.tensors_of(hf_zoo.call(model, test))
    assert hf_zoo.max_relative_error([got[0].numpy()], want[:1]) <= 5e-2
    quantized = [layer for layer in program.quantization_report().layers if layer.quantized]
    kernels = [k.precision for k in hf_zoo.call(program.report, test).kernels]
    assert quantized and sum(p.startswith("int8") for p in kernels) >= len(quantized) // 2, kernels
