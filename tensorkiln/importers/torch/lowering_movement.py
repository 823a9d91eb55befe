"""Lowerings of ATen's movement ops: views, permutations, slicing, concatenation, splitting, padding,
and reads by index (embedding, index_select, gather; `index` is lowering_indexing.py's)."""
from __future__ import annotations


from ...frontend.functions import cat
from ...frontend.functions import stack as tk_stack
from ...nn import functional as F
from ...frontend.tensor import normalize_dim
from .lowering import aten, register_lowering


# ---- movement ------------------------------------------------------------------------------------------

@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
                   aten._reshape_alias.default)
def view(x, size, *strides):
    return x.reshape(tuple(size))


@register_lowering(aten.flatten.using_ints)
def flatten(x, start_dim=0, end_dim=-1):
    return x.flatten(start_dim, end_dim)


@register_lowering(aten.permute.default, aten.permute_copy.default)
def permute(x, dims):
    return x.permute(tuple(dims))


@register_lowering(aten.transpose.int, aten.transpose_copy.int)
def transpose(x, dim0, dim1):
    return x.transpose(dim0, dim1)


@register_lowering(aten.t.default, aten.t_copy.default)
def t(x):
    return x.t()


@register_lowering(aten.expand.default, aten.expand_copy.default)
def expand(x, size, *, implicit=False):
    return x.expand(tuple(size))


@register_lowering(aten.clone.default, aten.alias.default, aten.alias_copy.default, aten.detach.default,
                   aten.detach_copy.default, aten.lift_fresh_copy.default, aten.contiguous.default,
                   aten.lift_fresh.default)
def clone(x, *, memory_format=None):
    return x


@register_lowering(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
                   aten.sym_constrain_range_for_size.default)
def no_op(*args, **kwargs):
    return None


@register_lowering(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    d = normalize_dim(dim, x.ndim, "slice")
    n = x.shape[d]
    start, stop, step = slice(start, end, step).indices(n)
    index = [slice(None)] * x.ndim
    index[d] = slice(start, max(start, stop), step)
    return x[tuple(index)]


@register_lowering(aten.select.int, aten.select_copy.int)
def select(x, dim, index):
    d = normalize_dim(dim, x.ndim, "select")
    key = [slice(None)] * x.ndim
    key[d] = index
    return x[tuple(key)]


@register_lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(x, dim):
    return x.unsqueeze(dim)


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.squeeze_copy.dim,
                   aten.squeeze_copy.dims, aten.squeeze_copy.default)
def squeeze(x, dim=None):
    if x.ndim == 0:
        return x
    return x.squeeze(tuple(dim) if isinstance(dim, (list, tuple)) else dim)


@register_lowering(aten.cat.default, aten.concat.default)
def cat_(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])  # legacy rule
    return cat(tensors, dim)


@register_lowering(aten.stack.default)
def stack(tensors, dim=0):
    return tk_stack(list(tensors), dim)


@register_lowering(aten.split.Tensor, aten.split_copy.Tensor)
def split(x, split_size, dim=0):
    return list(x.split(split_size, dim))


@register_lowering(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def split_with_sizes(x, split_sizes, dim=0):
    return list(x.split(list(split_sizes), dim))


@register_lowering(aten.unbind.int, aten.unbind_copy.int)
def unbind(x, dim=0):
    return list(x.unbind(dim))


@register_lowering(aten.chunk.default)
def chunk(x, chunks, dim=0):
    return list(x.chunk(chunks, dim))


@register_lowering(aten.flip.default)
def flip(x, dims):
    return x.flip(tuple(dims))


@register_lowering(aten.repeat.default)
def repeat(x, repeats):
    return x.repeat(tuple(repeats))


@register_lowering(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    return F.pad(x, list(pad), "constant", value)


@register_lowering(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return F.embedding(indices, weight)


@register_lowering(aten.index_select.default)
def index_select(x, dim, index):
    if x.ndim == 0:  # PyTorch indexes a 0-d tensor as one element (index [0])
        return x.reshape(1).index_select(0, index.reshape(-1)).reshape(())
    return x.index_select(dim, index)


@register_lowering(aten.gather.default)
def gather(x, dim, index, *, sparse_grad=False):
    return x.gather(dim, index)
