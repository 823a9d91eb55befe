"""Tutorial 1: eager tensors. Every operation computes at once, with numpy underneath.

    python examples/01_eager.py
"""
import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F

x = tk.randn(4, 8, seed=0)                    # also tk.tensor(np_array), tk.zeros, tk.arange, ...
w = tk.randn(8, 3, seed=1)
b = tk.zeros(3)

logits = x @ w + b                            # numpy broadcasting rules
probs = logits.softmax(-1)                    # PyTorch's method names ...
print("probabilities:", probs.numpy().round(3))
print("row sums:", probs.sum(dim=1).numpy())  # ... and numpy's spellings: probs.sum(axis=1)

labels = tk.tensor([0, 2, 1, 1])
print("cross-entropy:", F.cross_entropy(logits, labels).item())
print("argmax:", logits.argmax(-1).tolist(), "first row, reversed:", x[0, ::-1].numpy().round(2))

try:
    x @ tk.ones(3, 3)                          # shapes that do not fit
except tk.ShapeError as error:
    print("error, naming the op, the shapes and this line:\n ", error)

assert np.allclose(probs.numpy().sum(1), 1.0, atol=1e-6)
