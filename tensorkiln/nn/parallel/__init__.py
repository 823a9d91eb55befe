"""Parallel training and inference over MPI ranks: data parallelism (DistributedDataParallel) and
Megatron-style tensor parallelism (column-, row- and vocab-parallel layers, their cross-entropy)."""
from ...distributed.sampler import DistributedSampler
from .distributed import DistributedDataParallel
from .mappings import copy_to_group, gather_from_group, reduce_from_group, scatter_to_group
from .sharding import Shard, full_state_dict, load_full_state_dict
from .sync_batch_norm import SyncBatchNorm
from .tensor_parallel import (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding,
                              tensor_parallel_group, vocab_parallel_cross_entropy)

__all__ = ["ColumnParallelLinear", "DistributedDataParallel", "DistributedSampler", "RowParallelLinear", "Shard",
           "SyncBatchNorm", "VocabParallelEmbedding", "copy_to_group", "full_state_dict", "gather_from_group",
           "load_full_state_dict", "reduce_from_group", "scatter_to_group", "tensor_parallel_group",
           "vocab_parallel_cross_entropy"]
