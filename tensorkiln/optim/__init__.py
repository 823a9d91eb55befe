"""tk.optim: optimizers with PyTorch's update formulas, and learning-rate schedulers.

Updates are Tensor operations under no_grad that write parameters and state in
place, so a training step traced by tk.jit compiles them into the same graph
as forward and backward (the writes become graph outputs written back after
each call; see docs/autodiff.md).
"""
from . import lr_scheduler  # noqa: F401
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
