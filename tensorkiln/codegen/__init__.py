"""Code generation from loop IR: C99 + OpenMP (c.py, with its prelude and streaming stores)."""
from tensorkiln.codegen.c import CSource, generate_c

__all__ = ["CSource", "generate_c"]
