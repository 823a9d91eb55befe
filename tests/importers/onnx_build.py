"""Small helpers to build ONNX models with onnx.helper in tests."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset: int = 17, name: str = "test"):
    """A ModelProto: inputs/outputs as (name, elem_type, shape) triples, initializers as {name: array}."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(initializers).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def single(op: str, input_names, attrs=None, opset: int = 17, initializers=(), n_outputs: int = 1,
           shapes=None, dtype=FLOAT):
    """A one-node model whose graph inputs are `input_names` minus the initializers."""
    inits = dict(initializers)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, list(input_names), outs, **(attrs or {}))
    ins = [(n, dtype, (shapes or {}).get(n)) for n in input_names if n and n not in inits]
    return model([node], ins, [(o, TensorProto.UNDEFINED, None) for o in outs], inits, opset)
