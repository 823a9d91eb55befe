"""The importer's error for malformed models, and onnx's own exceptions that mean the same."""
from __future__ import annotations

import functools

from ...errors import TensorKilnError


class OnnxImportError(TensorKilnError, ValueError):
    """The ONNX model is malformed: unreadable bytes, missing definitions, dangling node inputs."""


class OnnxOutputShapeWarning(UserWarning):
    """A graph output's computed shape differs from the static shape the model declares for it."""


@functools.lru_cache(maxsize=None)
def onnx_errors() -> tuple[type[BaseException], ...]:
    """onnx's exceptions for an invalid model (checker, shape inference, schema), for wrapping.

    Looked up when needed: onnx is imported only once a model is loaded, and
    older onnx versions lack some of them.
    """
    import onnx.checker
    import onnx.defs
    import onnx.shape_inference
    found = []
    for module, name in ((onnx.checker, "ValidationError"), (onnx.shape_inference, "InferenceError"),
                         (onnx.defs, "SchemaError")):
        error = getattr(module, name, None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)
