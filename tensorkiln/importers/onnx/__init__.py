"""The ONNX importer (`tk.onnx`, docs/onnx.md).

model.py reads and checks a model and runs each node through the converter that
registry.py holds for its operator; functions.py expands operators the standard
defines as function bodies; external_data.py reads external tensor data under
containment rules; errors.py holds OnnxImportError. The converters live in one file per operator family
and register themselves when imported, which this package does here:

    elementwise    one-to-one unary table, binary ops, math formulas, Clip, Cast, Where
    activations    LeakyRelu, Elu, Gelu, PRelu..., Softmax/LogSoftmax/Hardmax, Dropout
    constants      Constant, ConstantOfShape, EyeLike, Range, Shape, Size
    movement       Reshape, Transpose, Squeeze/Unsqueeze, Concat, Split, Expand, Tile, Pad
    indexing       Slice, Gather*, OneHot, Trilu, ReverseSequence
    reductions     Reduce*, ArgMax/ArgMin, TopK, CumSum, CumProd
    contractions   MatMul, Gemm, Einsum
    conv           Conv, ConvTranspose
    pooling        MaxPool, AveragePool, LpPool, global pools, MaxUnpool
    normalization  BatchNormalization, LayerNormalization, InstanceNormalization, ..., LRN
    resize         Resize, Upsample
    quant          QuantizeLinear, DequantizeLinear and the integer matmul/conv ops
    rnn            RNN, GRU, LSTM
    scatter        ScatterElements, Scatter, ScatterND, TensorScatter
    data_dependent NonZero, Unique, Compress, NonMaxSuppression (output shapes from values;
                   staged.py runs such graphs as compiled stages)
"""
from . import (activations, constants, contractions, conv, data_dependent, elementwise, indexing,  # noqa: F401
               movement, normalization, pooling, quant, reductions, resize, rnn, scatter)
