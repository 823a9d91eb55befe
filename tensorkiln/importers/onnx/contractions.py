"""ONNX matrix products: MatMul, Gemm (transposes, alpha, beta) and Einsum, which is a
broadcast-multiply-and-sum (ellipses supported; an index repeated within one operand reads its
diagonal first)."""
from __future__ import annotations

import string

from ...frontend.functions import diagonal, matmul
from ...frontend.trace import composite_scope
from .registry import converter


@converter("MatMul")
def _matmul(ctx, inputs, attrs):
    return matmul(*inputs)


@converter("Gemm")
def _gemm(ctx, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.transpose(0, 1)
    if attrs.get("transB", 0):
        b = b.transpose(0, 1)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    with composite_scope("linear"):
        y = matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else c * beta).to(y.dtype)
    return y


@converter("Einsum")
def _einsum(ctx, inputs, attrs):
    equation = attrs["equation"].replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    spare = [c for c in string.ascii_letters if c not in equation]
    ell_rank = max((t.ndim - (len(term) - 3) for t, term in zip(inputs, terms) if "..." in term), default=0)
    ell = "".join(spare[:ell_rank])
    terms = [term.replace("...", ell[ell_rank - (t.ndim - (len(term) - 3)):]) if "..." in term else term
             for t, term in zip(inputs, terms)]
    if "->" not in equation:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        rhs = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    inputs, terms = list(inputs), list(terms)
    for k, term in enumerate(terms):  # a repeated index within one operand reads its diagonal
        while len(set(term)) != len(term):
            c = next(c for c in term if term.count(c) > 1)
            first, second = term.index(c), term.index(c, term.index(c) + 1)
            inputs[k] = diagonal(inputs[k], 0, first, second)  # the diagonal becomes the last axis
            term = "".join(x for i, x in enumerate(term) if i not in (first, second)) + c
        terms[k] = term
    letters = list(dict.fromkeys("".join(terms) + rhs))
    sizes = {}
    for t, term in zip(inputs, terms):
        for c, s in zip(term, t.shape):
            sizes[c] = max(sizes.get(c, 1), s)
    product = None
    for t, term in zip(inputs, terms):
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        moved = t.permute(tuple(order)) if order else t
        present = [term[i] for i in order]
        shaped = moved.reshape(tuple(sizes[c] if c in present and moved.shape[present.index(c)] != 1 else 1
                                     for c in letters))
        product = shaped if product is None else product * shaped
    summed = [i for i, c in enumerate(letters) if c not in rhs]
    if summed:
        product = product.sum(tuple(summed))
        if not product.dtype.is_floating and product.dtype != inputs[0].dtype:
            product = product.to(inputs[0].dtype)
    kept = [c for c in letters if c in rhs]
    out = product.permute(tuple(kept.index(c) for c in rhs)) if rhs else product
    return out.expand(tuple(sizes[c] for c in rhs)) if rhs else out
