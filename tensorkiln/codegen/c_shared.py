"""One C function for the kernels whose functions differ only in their buffers.

A transformer's layers lower to the same kernels over different buffers: BERT-base's 88 kernels are
9 functions, each written out once per layer. The C compiler's time grows with the text it is given
(GCC took 13.8 s on BERT-base's 650 KB module), so a release build writes such a function once, for
the first kernel of its group, and the entry calls it with each kernel's own buffers (the parameters
are positional: `kernel_k3_linear_attention(t10, t9, c15, ...)` computes kernel k10). Each kernel
keeps its comment (the graph nodes it computes), which then names the function that computes it.

Two functions are the same when their text is, once the kernel's name and its parameters' names are
put aside (the parameters renamed by position). A shared function whose text names its kernel (the
message of a failed allocation) takes that name as a first parameter, `tk_kernel`, so a message
names the kernel that failed. Debug builds, whose bounds checks name the kernel's buffers in their
messages, keep one function per kernel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tensorkiln.codegen.c_names import INDENT, c_comment, c_name, kernel_function_name
from tensorkiln.loops.program import Kernel

NAME_PARAMETER = "tk_kernel"


@dataclass(frozen=True)
class KernelCall:
    """How the entry calls one kernel: the function, and whether the kernel's name goes first."""

    function: str
    passes_name: bool = False

    def code(self, kernel: Kernel, arguments: list[str]) -> str:
        """The call's C expression with the kernel's arguments."""
        names = [f'"{kernel.name}"'] if self.passes_name else []
        return f"{self.function}({', '.join(names + arguments)})"


@dataclass
class SharedFunctions:
    """The lines each kernel contributes to the file (its function, or only its comment) and its call."""

    lines: dict[str, list[str]] = field(default_factory=dict)
    calls: dict[str, KernelCall] = field(default_factory=dict)

    def call(self, kernel: Kernel) -> KernelCall:
        return self.calls.get(kernel.name, KernelCall(kernel_function_name(kernel)))


def share_functions(functions: list[tuple[Kernel, list[str]]], share: bool = True) -> SharedFunctions:
    """Group the kernels' C functions (`functions`: each kernel with the lines KernelWriter.function gave)
    by their text up to names; the first kernel of a group keeps its function, the others call it."""
    out = SharedFunctions()
    if not share:
        out.lines = {kernel.name: lines for kernel, lines in functions}
        return out
    groups: dict[str, list[tuple[Kernel, list[str]]]] = {}
    for kernel, lines in functions:
        groups.setdefault(_shape(kernel, lines), []).append((kernel, lines))
    for group in groups.values():
        owner, owner_lines = group[0]
        function = kernel_function_name(owner)
        if len(group) == 1:
            out.lines[owner.name] = owner_lines
            continue
        passes_name = f'"{owner.name}"' in "\n".join(owner_lines[_head(owner_lines):])
        out.lines[owner.name] = _taking_name(owner, owner_lines) if passes_name else owner_lines
        for kernel, lines in group:
            out.calls[kernel.name] = KernelCall(function, passes_name)
            if kernel is not owner:
                start = _head(lines)
                note = c_comment(f" *   computed by {function} (the same function, over these buffers)")
                out.lines[kernel.name] = lines[:start - 1] + [note] + lines[start - 1:start]
    return out


def _head(lines: list[str]) -> int:
    """The index of the function's first line (after its comment)."""
    return next(i for i, line in enumerate(lines) if line.startswith("static void "))


def _shape(kernel: Kernel, lines: list[str]) -> str:
    """The function's text with the kernel's name put aside and its parameters renamed by position: equal
    for two kernels exactly when one function computes both."""
    text = "\n".join(lines[_head(lines):])
    text = text.replace(f'"{kernel.name}"', "TK_NAME").replace(kernel_function_name(kernel) + "(", "TK_FUNCTION(")
    names = {c_name(p.name): f"TK_P{i}" for i, p in enumerate(kernel.params)}
    if not names:
        return text
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], text)


def _taking_name(kernel: Kernel, lines: list[str]) -> list[str]:
    """The kernel's function with the name it reports taken as a first parameter instead."""
    start = _head(lines)
    head = lines[start]
    function = kernel_function_name(kernel)
    if head.endswith("("):  # one parameter per line
        new_head = [head, f"{INDENT}const char *{NAME_PARAMETER},"]
    elif head.endswith("(void)"):
        new_head = [head.replace("(void)", f"(const char *{NAME_PARAMETER})")]
    else:
        new_head = [head.replace(f"{function}(", f"{function}(const char *{NAME_PARAMETER}, ", 1)]
    body = [line.replace(f'"{kernel.name}"', NAME_PARAMETER) for line in lines[start + 1:]]
    return lines[:start] + new_head + body


__all__ = ["KernelCall", "SharedFunctions", "share_functions"]
