"""Error kinds raised by tensorkiln, and the helper that finds the user's source line.

Every error that comes from bad input names the op, the operands and the line
of the user's own program that asked for it (not a frame inside tensorkiln).
"""
from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class TensorKilnError(Exception):
    """Base class of every error tensorkiln raises on purpose."""


class ShapeError(TensorKilnError, ValueError):
    """Operand shapes do not fit the op."""


class DTypeError(TensorKilnError, TypeError):
    """Operand dtypes do not fit the op."""


class UnsupportedOpError(TensorKilnError, NotImplementedError):
    """An op (from ONNX, PyTorch or user code) that tensorkiln cannot run."""


class TraceError(TensorKilnError, RuntimeError):
    """A traced (symbolic) value was used in a way that needs a concrete value."""


class CompileError(TensorKilnError):
    """The C compiler rejected generated code; carries its output and the source path."""

    def __init__(self, message: str, source_path: str | None = None, compiler_output: str = ""):
        self.source_path = source_path
        self.compiler_output = compiler_output
        text = message
        if source_path:
            text += f"\n  generated source: {source_path}"
        if compiler_output:
            text += "\n  compiler output:\n" + compiler_output.rstrip()
        super().__init__(text)


def user_location() -> str | None:
    """Return 'file:line' of the innermost stack frame outside the tensorkiln package."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_PACKAGE_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def at_user_line(message: str, location: str | None = None) -> str:
    """Append the user's source location to an error message."""
    location = location or user_location()
    return f"{message}\n  at {location}" if location else message


class VerifyError(TensorKilnError):
    """A graph breaks an invariant of the IR (a bug in a pass, not in user code)."""


class AxisError(ShapeError, IndexError):
    """A dimension index out of range for a tensor's rank."""


class DistributedError(TensorKilnError, RuntimeError):
    """A distributed call failed or the ranks disagree; the message names the rank that saw it."""
