"""The front-end: eager and traced Tensors, creation, indexing, autodiff and tk.jit / tk.compile.

Layered in one direction: trace and the autodiff tape below tensor.py; functions, indexing,
nn.functional and autodiff.tensor_api above it (docs/architecture.md).
"""
