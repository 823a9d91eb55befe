"""How many vector registers a template's fused epilogue takes from its register tile.

A register-tiled kernel (conv_nchwc.py) keeps T*G accumulators, a step's
weights and a broadcast in vector registers, and runs its epilogue once per
tile. Where the reduction's innermost loop is a short run of taps (an RGB
stem: input blocks of one channel), GCC unrolls it and hoists the
epilogue's constant operands (a ReLU6's 0 and 6) out of the loops over
tiles, keeping each broadcast in its own register through the reduction: on
a CPU with 16 vector registers (AVX2) MobileNetV2's stem (a 6 x 2 tile)
stored and reloaded five of its twelve accumulators at every step. The
blocked kernels with longer channel loops (1x1 and 3x3 layers) load the
constants in the epilogue instead and spill nothing; the depthwise tile's
inner loop holds no spill either.
"""
from __future__ import annotations

from typing import Callable

from ...loops import expr as E
from ...loops.types import is_float


def epilogue_registers(epilogue: Callable[[list[E.Expr], E.Expr], E.Expr], index_rank: int, dtype: str) -> int:
    """Distinct floating-point constants of `epilogue(index, acc)`: each a vector register the kernel holds.

    The epilogue is probed with placeholder index variables and accumulator; it only builds an
    expression (lower.py builds a fresh ValueBuilder per call), so probing has no effect.

    >>> relu6 = lambda index, acc: E.minimum(E.maximum(acc, E.Const(0.0, "float32")), E.Const(6.0, "float32"))
    >>> epilogue_registers(relu6, 5, "float32")
    2
    >>> epilogue_registers(lambda index, acc: acc, 5, "float32")
    0
    """
    index = [E.Var(f"epilogue_probe_i{d}") for d in range(index_rank)]
    value = epilogue(index, E.Var("epilogue_probe_acc", dtype))
    return len({node for node in E.walk(value) if isinstance(node, E.Const) and is_float(node.dtype)})


__all__ = ["epilogue_registers"]
