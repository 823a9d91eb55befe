"""`matmul_integer` whose B is not a constant (so not packed for the u8 x s8 GEMM): a plain loop nest.

Each output element is a dot product of int8/uint8 operands widened to
int32, exact, with the epilogue applied at the store. Quantized models meet
this only where both operands are computed (an attention's Q @ K^T);
weights take the packed GEMM (gemm_u8s8.py).
"""
from __future__ import annotations

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Assign, For, Let, Stmt, Store, block
from ..inline import ValueBuilder
from ..schedule_defaults import output_nest


def matmul_integer_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(A @ B) in int32 for a `matmul_integer` node."""
    a_node, b_node = root.inputs
    k = a_node.shape[-1]
    kk, acc = E.Var("qi_k"), E.Var("qi_acc", "int32")

    def body(index: list[E.Expr], flat: E.Expr) -> Stmt:
        a = E.cast(values.value(a_node, index[:-1] + [kk]), "int32")
        b = E.cast(values.value(b_node, [kk, index[-1]]), "int32")
        total: E.Expr = acc
        stored = E.cast(total, out.value_dtype) if epilogue is None else epilogue(index, total)
        return block(Let(acc, E.Const(0, "int32")), For(kk, E.const(k), Assign(acc, acc + a * b)),
                     Store(out, flat, stored))

    return output_nest(root.shape, body, "qi_", work_per_element=max(k, 1), vectorize=False)
