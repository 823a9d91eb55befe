"""Megatron-style tensor parallelism: layers whose weights are split over the ranks of a group.

A transformer block needs one all-reduce in its attention and one in its MLP:
the first linear layer of each is column-parallel (each rank computes its
share of the output features, or heads, from the whole input) and the second
is row-parallel (each rank multiplies its share of the input features and the
partial sums are added by an all-reduce). The embedding is vocab-parallel
(each rank holds a range of rows; rows outside it read zero and the ranks'
results are added), and the language-model head and its cross-entropy work on
the vocab shards without gathering the logits.

Each layer draws its full weights exactly as its unsharded counterpart does
(nn.Linear, nn.Embedding) and keeps its shard, so after tk.manual_seed(s) a
model holds the same full weights at every degree of parallelism. `shards`
says how each parameter is split (sharding.py), for checkpoints.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...distributed import ProcessGroup, all_reduce, new_group
from ...distributed import rank as world_rank
from ...distributed import world_size
from ...errors import ShapeError
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor
from .. import functional as F
from ..modules.layers import Embedding
from ..modules.linear import Linear
from ..modules.module import Module, Parameter
from .mappings import copy_to_group, gather_from_group, reduce_from_group, scatter_to_group
from .sharding import Shard


def tensor_parallel_group(size: int) -> ProcessGroup | None:
    """The group of `size` consecutive ranks this rank belongs to (None: the whole world).

    Every rank calls it (it makes every block's group, in order); the blocks left over are the
    data-parallel dimension.
    """
    world = world_size()
    if size < 1 or world % size:
        raise ShapeError(f"tensor_parallel={size} must divide the number of ranks, {world}")
    if size == world:
        return None
    groups = [new_group(range(start, start + size)) for start in range(0, world, size)]
    return groups[world_rank() // size]


def _array(value) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


class ColumnParallelLinear(Module):
    """y = x W^T + b with W's rows (the output features) split over the group.

    gather_output: all-gather the output features (else each rank keeps its share, the input of a
    RowParallelLinear). interleave: the output holds that many blocks split alike (3 for a fused
    query|key|value). transposed: W is stored (in, out), as GPT-2's Conv1D.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = True,
                 group: ProcessGroup | None = None, dtype=dt.float32, *, interleave: int = 1,
                 transposed: bool = False, full_weight=None, full_bias=None):
        super().__init__()
        parts = world_size(group)
        if out_features % (parts * interleave):
            raise ShapeError(f"ColumnParallelLinear: {out_features} output features do not split into "
                             f"{interleave} block(s) over {parts} ranks")
        if full_weight is None:
            full = Linear(in_features, out_features, bias, dtype)  # the draws of the unsharded layer
            full_weight = full.weight.numpy().T if transposed else full.weight.numpy()
            full_bias = full.bias.numpy() if bias else None
        self.in_features, self.out_features, self.gather_output = in_features, out_features, gather_output
        self.group, self.transposed = group, transposed
        index = world_rank(group)  # the position in the group (the world rank without one)
        self.shards = {"weight": Shard(1 if transposed else 0, parts, out_features, interleave)}
        self.weight = Parameter(self.shards["weight"].split(_array(full_weight), index))
        if full_bias is not None:
            self.shards["bias"] = Shard(0, parts, out_features, interleave)
            self.bias = Parameter(self.shards["bias"].split(_array(full_bias), index))
        else:
            self.bias = None

    def forward(self, x):
        x = copy_to_group(x, self.group)
        y = x @ (self.weight if self.transposed else self.weight.transpose(0, 1))
        if self.bias is not None:
            y = y + self.bias
        return gather_from_group(y, self.group) if self.gather_output else y


class RowParallelLinear(Module):
    """y = x W^T + b with W's columns (the input features) split over the group; one all-reduce.

    input_is_parallel: x is already this rank's share of the input features (a ColumnParallelLinear's
    output); else it is split here. The bias is added once, after the all-reduce.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True,
                 group: ProcessGroup | None = None, dtype=dt.float32, *, transposed: bool = False,
                 full_weight=None, full_bias=None):
        super().__init__()
        parts = world_size(group)
        if in_features % parts:
            raise ShapeError(f"RowParallelLinear: {in_features} input features do not split over {parts} ranks")
        if full_weight is None:
            full = Linear(in_features, out_features, bias, dtype)
            full_weight = full.weight.numpy().T if transposed else full.weight.numpy()
            full_bias = full.bias.numpy() if bias else None
        self.in_features, self.out_features, self.input_is_parallel = in_features, out_features, input_is_parallel
        self.group, self.transposed = group, transposed
        index = world_rank(group)  # the position in the group (the world rank without one)
        self.shards = {"weight": Shard(0 if transposed else 1, parts, in_features)}
        self.weight = Parameter(self.shards["weight"].split(_array(full_weight), index))
        self.bias = Parameter(np.array(_array(full_bias))) if full_bias is not None else None

    def forward(self, x):
        if not self.input_is_parallel:
            x = scatter_to_group(x, self.group)
        y = reduce_from_group(x @ (self.weight if self.transposed else self.weight.transpose(0, 1)), self.group)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(Module):
    """An embedding whose rows (the vocabulary) are split over the group, padded to a multiple of it."""

    def __init__(self, num_embeddings: int, embedding_dim: int, group: ProcessGroup | None = None,
                 dtype=dt.float32, *, full_weight=None):
        super().__init__()
        if full_weight is None:
            full_weight = Embedding(num_embeddings, embedding_dim, dtype=dtype).weight.numpy()
        self.num_embeddings, self.embedding_dim, self.group = num_embeddings, embedding_dim, group
        index = world_rank(group)  # the position in the group (the world rank without one)
        self.shards = {"weight": Shard(0, world_size(group), num_embeddings)}
        self.vocab_start = index * self.shards["weight"].size
        self.weight = Parameter(self.shards["weight"].split(_array(full_weight), index))

    def forward(self, input):
        rows = self.weight.shape[0]
        outside = (input < self.vocab_start) | (input >= self.vocab_start + rows)
        local = where(outside, 0, input - self.vocab_start)
        looked_up = F.embedding(local, self.weight)
        return reduce_from_group(where(outside.unsqueeze(-1), 0.0, looked_up), self.group)

    def logits(self, x, gather: bool = True):
        """x @ weight^T, the tied language-model head: all vocab logits, or this rank's shard."""
        shard = copy_to_group(x, self.group) @ self.weight.transpose(0, 1)
        if not gather:
            return shard
        return gather_from_group(shard, self.group)[..., :self.num_embeddings]

    def greedy(self, x):
        """The index of the largest logit of x @ weight^T over the whole vocabulary (the greedy next
        token, int64), without gathering the logits: two all-reduces of one value per row instead of an
        all-gather of V of them. Each rank takes the largest logit of its shard and its index; an
        all-reduce (max) gives the largest of all; an all-reduce (min) of the indices of the ranks that
        hold it gives the first one, as argmax of the gathered logits does on a tie."""
        shard = self.logits(x, gather=False)
        width = shard.shape[-1]
        if self.vocab_start + width > self.num_embeddings:  # the last shard's padding rows never win
            columns = np.arange(self.vocab_start, self.vocab_start + width)
            shard = where(as_tensor(columns < self.num_embeddings), shard, float("-inf"))
        local_max = shard.amax(-1)
        index = shard.argmax(-1) + self.vocab_start
        best = all_reduce(local_max, "max", self.group)
        return all_reduce(where(local_max == best, index, self.num_embeddings), "min", self.group)


def vocab_parallel_cross_entropy(logits, target, vocab_start: int, vocab_size: int,
                                 group: ProcessGroup | None = None, reduction: str = "mean"):
    """Cross-entropy of logits split over the group along the last (vocab) axis, without gathering them.

    logits: (..., V/n), this rank's columns from `vocab_start`; target: (...) class indices. Three
    all-reduces of one value per row (max, sum of exponentials, the target's logit) replace a
    gather of the whole (..., V) logits. Padding columns (past vocab_size) do not count.
    """
    width = logits.shape[-1]
    columns = np.arange(vocab_start, vocab_start + width)
    if columns[-1] >= vocab_size:  # padding rows of the last shard
        logits = where(as_tensor(columns < vocab_size), logits, -1e30)
    row_max = all_reduce(logits.detach().amax(-1, keepdim=True), "max", group)
    shifted = logits - row_max
    sum_exp = reduce_from_group(shifted.exp().sum(-1), group)
    inside = (target >= vocab_start) & (target < vocab_start + width)
    local = where(inside, target - vocab_start, 0)
    picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1)
    target_logit = reduce_from_group(where(inside, picked, 0.0), group)
    loss = sum_exp.log() - target_logit
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss
