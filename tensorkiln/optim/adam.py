"""Adam and AdamW (PyTorch's formulas, with bias correction; amsgrad optional)."""
from __future__ import annotations

from ..frontend.autodiff.mode import no_grad
from .optimizer import Optimizer


class Adam(Optimizer):
    """m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).

    Adam adds weight_decay*p to the gradient (L2); AdamW instead decays the
    parameter: p *= 1 - lr*weight_decay, before the update.
    """

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid Adam hyperparameters lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    @no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in self._params_with_grad(group):
                g = -p.grad if group["maximize"] else p.grad
                lr = group.lr_as(p.dtype)
                step = self._state_tensor(p, "step")
                exp_avg = self._state_tensor(p, "exp_avg", like=p)
                exp_avg_sq = self._state_tensor(p, "exp_avg_sq", like=p)
                step.add_(1)
                if group["weight_decay"]:
                    if self.decoupled:
                        p.mul_(1.0 - lr * group["weight_decay"])
                    else:
                        g = g + p * group["weight_decay"]
                exp_avg.copy_(exp_avg * beta1 + g * (1.0 - beta1))
                exp_avg_sq.copy_(exp_avg_sq * beta2 + g * g * (1.0 - beta2))
                t = step.to(p.dtype)
                bias_correction1 = 1.0 - beta1 ** t
                bias_correction2 = 1.0 - beta2 ** t
                second = exp_avg_sq
                if group["amsgrad"]:
                    max_sq = self._state_tensor(p, "max_exp_avg_sq", like=p)
                    max_sq.copy_(max_sq.maximum(exp_avg_sq))
                    second = max_sq
                denom = second.sqrt() / bias_correction2.sqrt() + group["eps"]
                p.sub_(exp_avg / denom * (lr / bias_correction1))
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01, as PyTorch)."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)
