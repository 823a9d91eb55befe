"""Reverse-mode autodiff: grad mode, the tape, gradient rules' engine, tk.grad and tk.Function.

The gradient rules themselves live with the ops (each op table entry's `OpDef.gradient`,
helpers in `ir/ops/gradient.py`); they build with Tensor operations and the `Build` the tape passes them (build.py),
so the same rules run eagerly, while tracing (building the backward graph
inside tk.jit) and for higher order. See docs/autodiff.md. This package's
__init__ imports nothing that imports tensor.py, because tensor.py imports
`autodiff.mode` and `autodiff.tape`.
"""
from .mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
