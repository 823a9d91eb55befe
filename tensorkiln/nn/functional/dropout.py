"""dropout with a counter-based random stream (a seed tensor per call site)."""
from __future__ import annotations

from ...frontend.creation import randint
from ...frontend.functions import where
from ...frontend.random import philox
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import composite, mark_mutable
from .arguments import _floating


def new_dropout_seed() -> Tensor:
    """A dropout seed: an int64 0-d tensor drawn from tk.manual_seed's generator, advanced by every
    dropout call (marked mutable, so compiled functions read it per call and write it back)."""
    seed = randint(0, 2 ** 31 - 1, ())
    mark_mutable(seed)
    return seed


_default_seed: list = []  # the seed F.dropout uses when none is given (created on first use)


@composite("dropout")
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,
            seed: Tensor | None = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (identity when not training).

    The mask compares Philox uniform numbers under key `seed` (an int64 0-d tensor,
    advanced by one per call) with p (frontend/random.py); without a seed a default one drawn from
    tk.manual_seed's generator is used. Works the same eagerly and inside tk.jit.
    """
    x = _floating(as_tensor(input))
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    if seed is None:
        if not _default_seed:
            _default_seed.append(new_dropout_seed())
        seed = _default_seed[0]
    keep = philox(seed, 0, tuple(x.shape)) >= p
    seed.add_(1)
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)
