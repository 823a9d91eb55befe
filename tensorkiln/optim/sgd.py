"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's formulas)."""
from __future__ import annotations

from ..frontend.autodiff.mode import no_grad
from ..frontend.functions import where
from .optimizer import Optimizer


class SGD(Optimizer):
    """p -= lr * d, d = g + wd*p, with momentum buffer b = m*b + (1-dampening)*d (b = d on the first step);
    Nesterov uses d + m*b, plain momentum uses b."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"invalid SGD hyperparameters lr={lr}, momentum={momentum}, weight_decay={weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            momentum, dampening = group["momentum"], group["dampening"]
            for p in self._params_with_grad(group):
                d = -p.grad if group["maximize"] else p.grad
                if group["weight_decay"]:
                    d = d + p * group["weight_decay"]
                if momentum:
                    buf = self._state_tensor(p, "momentum_buffer", like=p)
                    first = self._state_tensor(p, "step") == 0
                    buf.copy_(where(first, d, buf * momentum + d * (1.0 - dampening)))
                    self._state_tensor(p, "step").add_(1)
                    d = d + buf * momentum if group["nesterov"] else buf
                p.sub_(d * group.lr_as(p.dtype))
        return loss
