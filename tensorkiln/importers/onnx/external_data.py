"""External tensor data (weights stored in files beside the model), read under containment rules.

A model file is untrusted input, and its external-data entries name files to
read. Every such file must lie inside one directory, the model's own (or the
`base_dir=` the caller names): the location must be relative, must not climb
out with `..`, and must not leave through a symbolic link (the resolved path
must still lie inside the resolved directory); it must be a regular file, and
offset and length must lie within it. A model given as bytes or as a
ModelProto has no directory of its own: without `base_dir=` it may not read
external data at all, rather than reading relative to the process's working
directory (onnx's default), which would let a model from the network read a
server's files into its weights.

The checks are tensorkiln's own, so they hold whatever the installed onnx
version enforces; the data is read here and stored in the tensor (`raw_data`),
so nothing later (numpy_helper.to_array) touches the disk.
"""
from __future__ import annotations

import os
import stat
from typing import Iterator

from .errors import OnnxImportError

EXTERNAL = 1  # TensorProto.EXTERNAL


def external_tensors(model) -> Iterator:
    """Every TensorProto of the model that stores its data externally: initializers (sparse ones too),
    attribute tensors, in subgraphs and in model-local functions."""
    for tensor in _all_tensors(model):
        if tensor.data_location == EXTERNAL:
            yield tensor


def _all_tensors(model) -> Iterator:
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _node_tensors(function.node)


def _graph_tensors(graph) -> Iterator:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    yield from _node_tensors(graph.node)


def _node_tensors(nodes) -> Iterator:
    for node in nodes:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for graph in attr.graphs:
                yield from _graph_tensors(graph)


def load_external_data(model, base_dir: str | None, model_name: str) -> None:
    """Read every external tensor's data from under `base_dir` into the tensor; OnnxImportError if one
    may not be read (no base_dir, a path outside it, a missing file, a bad offset or length)."""
    tensors = list(external_tensors(model))
    if not tensors:
        return
    if base_dir is None:
        names = ", ".join(repr(t.name) for t in tensors[:5]) + (", ..." if len(tensors) > 5 else "")
        raise OnnxImportError(
            f"ONNX model {model_name!r} stores tensor data in external files ({names}); a model given as "
            "bytes or an onnx.ModelProto reads external data only from a directory named with "
            "base_dir= (tk.onnx.load(model, base_dir=...)), never from the working directory")
    root = os.path.realpath(base_dir)
    if not os.path.isdir(root):
        raise OnnxImportError(f"base_dir {base_dir!r} of ONNX model {model_name!r} is not a directory")
    for tensor in tensors:
        entries = {entry.key: entry.value for entry in tensor.external_data}
        where = f"ONNX model {model_name!r}: tensor {tensor.name!r}"
        path = _contained_path(entries.get("location", ""), root, where)
        tensor.raw_data = _read_range(path, _non_negative(entries, "offset", where),
                                      _non_negative(entries, "length", where), where)
        del tensor.external_data[:]
        tensor.data_location = 0  # TensorProto.DEFAULT: the data is in the tensor now


def _contained_path(location: str, root: str, where: str) -> str:
    """The resolved path of `location` under `root`; OnnxImportError when it is absolute, escapes `root`
    (through `..` or a symbolic link) or is not a regular file."""
    if not location:
        raise OnnxImportError(f"{where} stores its data externally but names no file (location)")
    if "\0" in location or os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise OnnxImportError(f"{where}: external data location {location!r} must be a path relative to "
                              "the model's directory")
    if ".." in location.replace("\\", "/").split("/"):
        raise OnnxImportError(f"{where}: external data location {location!r} may not contain '..'")
    resolved = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, resolved]) != root:  # a symbolic link on the way points outside
        raise OnnxImportError(f"{where}: external data location {location!r} leads outside the model's "
                              f"directory {root!r} (through a symbolic link)")
    if not os.path.exists(resolved):
        raise OnnxImportError(f"{where}: external data file {location!r} does not exist in {root!r}")
    if not os.path.isfile(resolved):
        raise OnnxImportError(f"{where}: external data location {location!r} is not a regular file")
    return resolved


def _non_negative(entries: dict, key: str, where: str) -> int | None:
    """An integer `offset`/`length` entry, or None when absent."""
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        raise OnnxImportError(f"{where}: external data {key} {entries[key]!r} is not an integer") from None
    if value < 0:
        raise OnnxImportError(f"{where}: external data {key} {value} is negative")
    return value


def _read_range(path: str, offset: int | None, length: int | None, where: str) -> bytes:
    """`length` bytes (or the rest) of the file from `offset`, checked against the file's size."""
    # O_NONBLOCK: a FIFO swapped in after the checks must not block the open; the fstat below refuses it
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise OnnxImportError(f"{where}: external data file cannot be opened: {err.strerror}") from None
    with os.fdopen(fd, "rb") as data:
        info = os.fstat(data.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OnnxImportError(f"{where}: external data location is not a regular file")
        start = offset or 0
        if start > info.st_size:
            raise OnnxImportError(f"{where}: external data offset {start} is past the end of the file "
                                  f"({info.st_size} bytes)")
        if length is not None and length > info.st_size - start:
            raise OnnxImportError(f"{where}: external data length {length} at offset {start} is past the end "
                                  f"of the file ({info.st_size} bytes)")
        data.seek(start)
        return data.read(info.st_size - start if length is None else length)
