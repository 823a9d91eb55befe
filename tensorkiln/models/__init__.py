"""The model zoo: ResNet-18, MobileNetV2, BERT, GPT-2 and the demo MLP, as tk.nn modules.

Weights are PyTorch's default initialization drawn after `tk.manual_seed`;
the module and parameter names follow torchvision and Hugging Face, so a
PyTorch state_dict (tensors or numpy arrays) loads with `load_state_dict`
(GPT-2: `load_hf_state_dict`, which skips the tied head and mask buffers).
"""
from __future__ import annotations

from .bert import BertConfig, BertModel, bert_base
from .gpt2 import GPT2Config, GPT2LMHeadModel
from .mlp import MLP
from .mobilenet import MobileNetV2
from .resnet import ResNet18

MODELS = {
    "resnet18": ResNet18,
    "mobilenetv2": MobileNetV2,
    "bert": bert_base,
    "gpt2": GPT2LMHeadModel,
    "mlp": MLP,
}


def create(name: str, **kwargs):
    """A model of the zoo by name (resnet18, mobilenetv2, bert, gpt2, mlp)."""
    try:
        return MODELS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; the zoo has {', '.join(MODELS)}") from None


__all__ = ["BertConfig", "BertModel", "GPT2Config", "GPT2LMHeadModel", "MLP", "MobileNetV2", "ResNet18",
           "bert_base", "create", "MODELS"]
