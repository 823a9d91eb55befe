"""The ONNX importer (`tk.onnx`, docs/onnx.md).

model.py loads a model (model_reading.py, model_checks.py) and runs each node
(model_execution.py) through the converter that registry.py holds for its operator;
functions.py expands operators the standard defines as function bodies; external_data.py
reads external tensor data under containment rules; errors.py holds OnnxImportError. The converters live in one file per operator family
and register themselves when imported, which this package does here:

    elementwise    one-to-one unary table, binary ops, math formulas, Clip, Cast, Where
    activations    LeakyRelu, Elu, Gelu, PRelu..., Softmax/LogSoftmax/Hardmax, Dropout
    constants      Constant, ConstantOfShape, EyeLike, Range, Shape, Size, MelWeightMatrix
    movement       Reshape, Transpose, Squeeze/Unsqueeze, Concat, Split, Expand, Tile, Pad
    indexing       Slice, Gather*, OneHot, Trilu, ReverseSequence
    reductions     Reduce*, ArgMax/ArgMin, TopK, CumSum, CumProd
    contractions   MatMul, Gemm, Einsum
    conv           Conv, ConvTranspose
    pooling        MaxPool, AveragePool, LpPool, global pools, MaxUnpool
    normalization  BatchNormalization, LayerNormalization, InstanceNormalization, ..., LRN
    resize         Resize, Upsample
    quant          QuantizeLinear, DequantizeLinear and the integer matmul/conv ops
    quant_contrib  com.microsoft: ONNX Runtime's QLinearAdd, QLinearMul, QGemm, QLinearSoftmax, pools,
                   QLinearConcat, QLinearWhere, ..., DynamicQuantizeMatMul, MatMulIntegerToFloat,
                   MatMulNBits, DynamicQuantizeLSTM
    rnn            RNN, GRU, LSTM
    control        If, Loop, Scan (tk.cond, tk.while_loop, tk.scan)
    scatter        ScatterElements, Scatter, ScatterND, TensorScatter
    data_dependent NonZero, Unique, Compress, NonMaxSuppression (output shapes from values;
                   staged.py runs such graphs as compiled stages)
    losses         NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
    sampling       GridSample, AffineGrid
    col2im         Col2Im
    deform_conv    DeformConv (2 spatial axes)
    linalg         Det
    tfidf          TfIdfVectorizer (integer tokens)
    ml             ai.onnx.ml: Binarizer, ArrayFeatureExtractor, LabelEncoder (numbers), TreeEnsemble
    linear_attention  LinearAttention (the recurrence unrolled over the sequence)
"""
from . import (activations, col2im, constants, contractions, control, conv, data_dependent,  # noqa: F401
               deform_conv, elementwise, indexing, linalg, linear_attention, losses, ml, movement,
               normalization, pooling, quant, quant_contrib, reductions, resize, rnn, sampling, scatter, tfidf)
