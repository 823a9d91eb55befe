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
