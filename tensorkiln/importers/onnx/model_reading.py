"""Reading an ONNX model: a path, bytes or ModelProto becomes a ModelProto that has a graph, an IR version,
an opset and its external data, or the reading fails with an OnnxImportError that names the problem.

Also here: the opset version per domain a model imports, and the inlining of
its model-local functions.
"""
from __future__ import annotations

import os
from typing import Any

from .errors import OnnxImportError
from .external_data import external_tensors, load_external_data


def read_model(source, base_dir: str | os.PathLike | None) -> tuple[Any, str]:
    """A ModelProto from a path, bytes or ModelProto, and a name for messages.

    External data is read from under `base_dir`, for a path by default the
    model's own directory (external_data.py's containment rules); a model
    given as bytes or ModelProto reads none without `base_dir`.
    """
    try:
        import onnx
    except ImportError:  # pragma: no cover
        raise ImportError("tk.onnx needs the onnx package: pip install onnx") from None
    if isinstance(source, onnx.ModelProto):
        model, name = source, source.graph.name or "model"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse_bytes(bytes(source))
        name = model.graph.name or "model"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        model, name = _read_file(path), os.path.basename(path)
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise TypeError(f"tk.onnx.load expects a path, bytes or onnx.ModelProto, got {type(source).__name__}")
    _check_header(model, name)
    if isinstance(source, onnx.ModelProto) and any(True for _ in external_tensors(model)):
        model = _copy(model)  # the external data is read into the tensors: leave the caller's proto alone
    load_external_data(model, None if base_dir is None else os.fspath(base_dir), name)
    return model, name


def _parse_bytes(data: bytes):
    import onnx
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"the bytes are not a readable ONNX model: {err}") from None
    return model


def _read_file(path: str):
    """The ModelProto in the file at `path`, its external data not read (load_external_data does that)."""
    import onnx
    if os.path.isdir(path):
        raise OnnxImportError(f"ONNX model path {path!r} is a directory, not a model file")
    if not os.path.exists(path):
        raise OnnxImportError(f"ONNX model file {path!r} does not exist")
    if not os.path.isfile(path):
        raise OnnxImportError(f"ONNX model path {path!r} is not a regular file")
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as err:  # protobuf's DecodeError, OSError (permissions), ...
        raise OnnxImportError(f"{path!r} is not a readable ONNX model: {err}") from None


def _check_header(model, name: str) -> None:
    """A model needs a graph with outputs, an IR version and (from IR version 3) an opset import: an empty
    or truncated file parses as an empty ModelProto, which must not load as a model computing nothing."""
    if not model.HasField("graph"):
        raise OnnxImportError(f"ONNX model {name!r} has no graph (an empty or truncated file, or not a model)")
    if model.ir_version <= 0:
        raise OnnxImportError(f"ONNX model {name!r} has no IR version (ir_version {model.ir_version})")
    if not model.opset_import and model.ir_version >= 3:  # IR versions 1 and 2 predate opset imports
        raise OnnxImportError(f"ONNX model {name!r} imports no opset (IR version {model.ir_version} needs one)")
    if not model.graph.output:
        raise OnnxImportError(f"ONNX model {name!r} has no graph outputs")


def _copy(model):
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def model_opsets(model) -> dict[str, int]:
    result = {}
    for entry in model.opset_import:
        domain = entry.domain or "ai.onnx"
        result[domain] = int(entry.version)
    if not model.opset_import and model.ir_version and model.ir_version < 3:
        result["ai.onnx"] = 1  # IR version 1/2 models implied opset 1
    return result


def inline_functions(model, name: str):
    """Inline model-local functions (onnx.inliner), so every node is an ai.onnx operator or unknown."""
    if not len(model.functions):
        return model
    try:
        from onnx import inliner
    except ImportError:  # an onnx without the inliner: the function calls are reported as unsupported
        return model
    try:
        return inliner.inline_local_functions(model)
    except Exception as err:  # the inliner's checks: a malformed function or call
        raise OnnxImportError(f"ONNX model {name!r}: its model-local functions cannot be inlined: {err}") from None
