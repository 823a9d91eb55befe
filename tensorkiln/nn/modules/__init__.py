"""tk.nn layers: Module, Parameter and PyTorch-compatible layers."""
from .attention import MultiheadAttention
from .container import ModuleList, Sequential
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, CrossEntropyLoss, Dropout, Embedding, MaxPool2d,
                     MSELoss, ReLU, Sigmoid, SiLU, Softmax, Tanh)
from .linear import Conv2d, Flatten, Identity, Linear
from .module import Module, Parameter
from .normalization import BatchNorm2d, LayerNorm

__all__ = ["Module", "Parameter", "Linear", "Identity", "Flatten", "Conv2d", "BatchNorm2d", "LayerNorm",
           "Embedding", "Dropout", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Sequential", "ModuleList", "MultiheadAttention",
           "CrossEntropyLoss", "MSELoss"]
