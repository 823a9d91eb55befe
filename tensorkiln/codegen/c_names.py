"""C spellings of the generated file: IR names spelled so they hide nothing C or the prelude defines,
the names of kernel and sub-program functions, comment text and the indentation."""
from __future__ import annotations

import functools

from tensorkiln.loops.ir import Kernel, LoopIRError
from tensorkiln.loops.math import MATH_FUNCTIONS

INDENT = "    "  # one level of the generated C's indentation

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool true false
""".split())


@functools.lru_cache(maxsize=None)
def _reserved_names(math_functions: int) -> frozenset[str]:
    """Identifiers the generated file uses itself: an IR name must not hide any of them.

    Keyed by the number of math functions: an op module may add one after this module is imported.
    """
    math = {spelling.split("(")[0] for fn in MATH_FUNCTIONS.values() for spelling in fn.c.values()}
    math |= {"sqrt", "sqrtf", "floor", "floorf", "fmod", "fmodf", "copysign", "copysignf", "rintf"}
    libc = {"malloc", "free", "memcpy", "strncpy", "snprintf", "size_t", "NULL", "INFINITY", "NAN",
            "INT64_C", "INT64_MIN", "INT32_MIN", "main", "errno", "args", "arena"}
    return frozenset(C_KEYWORDS | math | libc)


def c_name(name: str) -> str:
    """The C spelling of an IR name: itself, or with a trailing underscore where it would hide
    a C keyword, a libc/libm name (a buffer named `exp`), a `*_t` type or one of our `tk_`,
    `kernel_`, `TK_` helpers."""
    if (name in _reserved_names(len(MATH_FUNCTIONS)) or name.endswith("_t") or name.startswith(("tk_", "TK_", "kernel_", "__"))
            or (name[:1] == "_" and name[1:2].isupper())):
        return f"{name}_"
    return name


def program_function_name(program: str) -> str:
    """The static C entry of a sub-program (a branch or loop body of a control-flow op)."""
    return f"tk_program_{program}"


def kernel_function_name(kernel: Kernel) -> str:
    """The C function of a kernel: `kernel_<name>`, apart from buffer and variable names."""
    return f"kernel_{kernel.name}"


def check_unique_c_names(names: list[str], where: str) -> None:
    """Two IR names that map to one C name (`exp` and `exp_`) would silently merge: refuse."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(c_name(name), name)
        if other != name:
            raise LoopIRError(f"{where}: names {other!r} and {name!r} would both be {c_name(name)!r} in C; "
                              "rename one")


def c_comment(text: str) -> str:
    """`text` made safe inside a C block comment (an IR name or a graph node's text may hold `*/`)."""
    return text.replace("*/", "* /")
