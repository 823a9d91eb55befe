"""Hugging Face transformers architectures built from small configs with seeded random weights.

    entry = ARCHITECTURES["bert"]
    model, args, kwargs = entry.build("tiny")     # an eval-mode module and its example inputs
    model(*args, **kwargs)

No weights are downloaded: each model is its config class with random
initialization under a fixed seed. Sizes: "tiny" (the unit tests: hidden 32,
one layer, 6 tokens, 32x32 images), "small" (the benchmark: hidden 256, 4 layers,
128 tokens or a 224x224 image). `compare` runs a model through both PyTorch
import paths (tk.from_torch and torch.compile(backend="tensorkiln")) and gives
the largest relative error of each against eager PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import transformers

from ..importers.torch import from_torch

#: Sizes by name: hidden width, layers, heads, sequence length, image side, batch.
SIZES = {"tiny": dict(hidden=32, layers=1, heads=4, seq=6, image=32, batch=1),
         "small": dict(hidden=256, layers=4, heads=8, seq=128, image=224, batch=1)}
VOCAB = 1000


@dataclass(frozen=True)
class Architecture:
    """One transformers architecture: its kind and how to build a model and example inputs at a size."""
    name: str
    kind: str  # encoder | decoder | encoder-decoder | vision | speech
    make: Callable[[dict], tuple]  # size dict -> (model, args, kwargs)

    def build(self, size: str = "tiny", seed: int = 0) -> tuple[torch.nn.Module, tuple, dict]:
        """The eval-mode model with seeded random weights and its example (args, kwargs)."""
        torch.manual_seed(seed)
        model, args, kwargs = self.make(SIZES[size])
        return model.eval(), args, kwargs


def _tokens(s: dict, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(3, vocab, (s["batch"], s["seq"]))


def _text_config(s: dict) -> dict:
    return dict(hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                intermediate_size=2 * s["hidden"], vocab_size=VOCAB, max_position_embeddings=512)


def _encoder(config_cls, model_cls, **extra) -> Callable[[dict], tuple]:
    def make(s):
        model = model_cls(config_cls(**{**_text_config(s), **extra}))
        ids = _tokens(s)
        mask = torch.ones_like(ids)
        mask[:, -1] = 0  # one padded position: the attention mask is used, not ignored
        return model, (ids,), {"attention_mask": mask}
    return make


def _decoder(config_cls, model_cls, **extra) -> Callable[[dict], tuple]:
    def make(s):
        config = dict(_text_config(s), num_key_value_heads=max(1, s["heads"] // 2), **extra)
        model = model_cls(config_cls(**config))
        return model, (_tokens(s),), {"use_cache": False}
    return make


def _distilbert(s):
    config = transformers.DistilBertConfig(dim=s["hidden"], n_layers=s["layers"], n_heads=s["heads"],
                                           hidden_dim=2 * s["hidden"], vocab_size=VOCAB)
    ids = _tokens(s)
    return transformers.DistilBertModel(config), (ids,), {"attention_mask": torch.ones_like(ids)}


def _albert(s):
    config = transformers.AlbertConfig(**_text_config(s), embedding_size=s["hidden"] // 2)
    ids = _tokens(s)
    return transformers.AlbertModel(config), (ids,), {"attention_mask": torch.ones_like(ids)}


def _gpt2(s):
    config = transformers.GPT2Config(n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                                     n_positions=512, vocab_size=VOCAB, bos_token_id=1, eos_token_id=2)
    return transformers.GPT2LMHeadModel(config), (_tokens(s),), {"use_cache": False}


def _phi(s):
    config = dict(_text_config(s), num_key_value_heads=s["heads"] // 2, partial_rotary_factor=0.5)
    return transformers.PhiForCausalLM(transformers.PhiConfig(**config)), (_tokens(s),), {"use_cache": False}


def _gemma(s):
    config = dict(_text_config(s), num_key_value_heads=1, head_dim=s["hidden"] // s["heads"])
    return transformers.GemmaForCausalLM(transformers.GemmaConfig(**config)), (_tokens(s),), {"use_cache": False}


def _t5(s):
    config = transformers.T5Config(d_model=s["hidden"], d_kv=s["hidden"] // s["heads"], d_ff=2 * s["hidden"],
                                   num_layers=s["layers"], num_heads=s["heads"], vocab_size=VOCAB)
    ids = _tokens(s)
    return transformers.T5Model(config), (ids,), {"decoder_input_ids": ids[:, : max(1, s["seq"] // 2)],
                                                   "use_cache": False}


def _bart(s):
    config = transformers.BartConfig(d_model=s["hidden"], encoder_layers=s["layers"], decoder_layers=s["layers"],
                                     encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
                                     encoder_ffn_dim=2 * s["hidden"], decoder_ffn_dim=2 * s["hidden"],
                                     vocab_size=VOCAB, max_position_embeddings=512)
    return transformers.BartModel(config), (_tokens(s),), {"use_cache": False}


def _pixels(s: dict, channels: int = 3) -> torch.Tensor:
    return torch.randn(s["batch"], channels, s["image"], s["image"])


def _vit(s):
    config = transformers.ViTConfig(hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                    num_attention_heads=s["heads"], intermediate_size=2 * s["hidden"],
                                    image_size=s["image"], patch_size=s["image"] // 4 if s["image"] < 64 else 16)
    return transformers.ViTModel(config), (_pixels(s),), {}


def _swin(s):
    tiny = s["image"] < 64
    config = transformers.SwinConfig(image_size=s["image"], patch_size=4, embed_dim=s["hidden"] // 4 if tiny else 96,
                                     depths=[2, 2] if tiny else [2, 2, 2], num_heads=[2, 4] if tiny else [3, 6, 12],
                                     window_size=4 if tiny else 7)
    return transformers.SwinModel(config), (_pixels(s),), {}


def _convnext(s):
    tiny = s["image"] < 64
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32] if tiny else [48, 96, 192, 384],
                                         depths=[1, 1] if tiny else [1, 1, 3, 1], num_stages=2 if tiny else 4)
    return transformers.ConvNextModel(config), (_pixels(s),), {}


def _resnet(s):
    tiny = s["image"] < 64
    config = transformers.ResNetConfig(embedding_size=16 if tiny else 32,
                                       hidden_sizes=[16, 32] if tiny else [64, 128, 256, 512],
                                       depths=[1, 1] if tiny else [1, 1, 1, 1], layer_type="bottleneck")
    return transformers.ResNetModel(config), (_pixels(s),), {}


def _whisper_encoder(s):
    frames = 16 if s["seq"] <= 16 else 100
    config = transformers.WhisperConfig(d_model=s["hidden"], encoder_layers=s["layers"], decoder_layers=1,
                                        encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
                                        encoder_ffn_dim=2 * s["hidden"], decoder_ffn_dim=2 * s["hidden"],
                                        num_mel_bins=16, max_source_positions=frames, vocab_size=VOCAB,
                                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    encoder = transformers.WhisperModel(config).get_encoder()
    return encoder, (torch.randn(s["batch"], 16, 2 * frames),), {}


def _wav2vec2(s):
    config = transformers.Wav2Vec2Config(hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                         num_attention_heads=s["heads"], intermediate_size=2 * s["hidden"],
                                         conv_dim=(32, 32, 32), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                                         num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
                                         vocab_size=32)
    return transformers.Wav2Vec2Model(config), (torch.randn(s["batch"], 20 * s["seq"] + 10),), {}


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in [
    Architecture("bert", "encoder", _encoder(transformers.BertConfig, transformers.BertModel)),
    Architecture("roberta", "encoder", _encoder(transformers.RobertaConfig, transformers.RobertaModel)),
    Architecture("distilbert", "encoder", _distilbert),
    Architecture("albert", "encoder", _albert),
    Architecture("electra", "encoder", _encoder(transformers.ElectraConfig, transformers.ElectraModel)),
    Architecture("deberta-v2", "encoder", _encoder(transformers.DebertaV2Config, transformers.DebertaV2Model)),
    Architecture("llama", "decoder", _decoder(transformers.LlamaConfig, transformers.LlamaForCausalLM)),
    Architecture("mistral", "decoder", _decoder(transformers.MistralConfig, transformers.MistralForCausalLM,
                                                sliding_window=4)),
    Architecture("qwen2", "decoder", _decoder(transformers.Qwen2Config, transformers.Qwen2ForCausalLM)),
    Architecture("phi", "decoder", _phi),
    Architecture("gemma", "decoder", _gemma),
    Architecture("gpt2", "decoder", _gpt2),
    Architecture("t5", "encoder-decoder", _t5),
    Architecture("bart", "encoder-decoder", _bart),
    Architecture("vit", "vision", _vit),
    Architecture("swin", "vision", _swin),
    Architecture("convnext", "vision", _convnext),
    Architecture("resnet", "vision", _resnet),
    Architecture("whisper-encoder", "speech", _whisper_encoder),
    Architecture("wav2vec2", "speech", _wav2vec2),
]}


def random_batches(args: tuple, kwargs: dict, count: int, seed: int) -> list[dict | tuple]:
    """`count` inputs like the example (args, kwargs), drawn afresh: token ids in the vocabulary, other
    tensors standard normal; a text model's as a dict of keyword arguments (input_ids and the rest, as a
    tokenizer gives them), another's as a tuple (calibration data for tk.quantize, or test inputs)."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        fresh = [torch.from_numpy(rng.integers(3, VOCAB, a.shape)) if not a.is_floating_point()
                 else torch.from_numpy(rng.standard_normal(a.shape).astype(np.float32)) for a in args]
        batches.append({"input_ids": fresh[0], **kwargs} if kwargs else tuple(fresh))
    return batches


def call(fn, batch):
    """fn on one of random_batches' inputs."""
    return fn(**batch) if isinstance(batch, dict) else fn(*batch)


def tensors_of(output) -> list[torch.Tensor]:
    """The floating-point tensors of a model output (ModelOutput, tuple, tensor), in order."""
    leaves = torch.utils._pytree.tree_leaves(output.to_tuple() if hasattr(output, "to_tuple") else output)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point()]


def max_relative_error(result: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """max |result - expected| / max |expected| over every output, each scaled by its own largest value."""
    if len(result) != len(expected):
        raise AssertionError(f"{len(result)} outputs, expected {len(expected)}")
    worst = 0.0
    for got, want in zip(result, expected):
        got = np.asarray(got, dtype=np.float64)
        want = want.detach().double().numpy()
        if got.shape != want.shape:
            raise AssertionError(f"output shape {got.shape}, expected {want.shape}")
        worst = max(worst, float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)))
    return worst


def through_from_torch(model, args, kwargs) -> list:
    """The model's floating-point outputs computed by tk.from_torch."""
    program = from_torch(model, args, kwargs)
    return [t.numpy() if hasattr(t, "numpy") else t for t in tensors_of(_as_torch(program(*args, **kwargs)))]


def through_torch_compile(model, args, kwargs) -> list:
    """The model's floating-point outputs computed by torch.compile(backend="tensorkiln")."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tensorkiln")
    with torch.no_grad():
        return [t.numpy() for t in tensors_of(compiled(*args, **kwargs))]


def _as_torch(output):
    """tk Tensors in an output structure become torch tensors (so ModelOutput's helpers apply)."""
    return torch.utils._pytree.tree_map(lambda v: torch.from_numpy(np.asarray(v.numpy()))
                                        if hasattr(v, "numpy") and not isinstance(v, torch.Tensor) else v, output)


def compare(name: str, size: str = "tiny") -> dict[str, float]:
    """Largest relative error against eager of each import path ("from_torch", "torch.compile")."""
    model, args, kwargs = ARCHITECTURES[name].build(size)
    with torch.no_grad():
        expected = tensors_of(model(*args, **kwargs))
    return {"from_torch": max_relative_error(through_from_torch(model, args, kwargs), expected),
            "torch.compile": max_relative_error(through_torch_compile(model, args, kwargs), expected)}
