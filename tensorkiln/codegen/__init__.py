"""Code generation from loop IR: C99 + OpenMP (c.py), and `build` (generate, compile, load)."""
from tensorkiln.codegen.build import build
from tensorkiln.codegen.c import CSource, generate_c

__all__ = ["CSource", "build", "generate_c"]
