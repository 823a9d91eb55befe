"""Tensor parallelism for the zoo's transformers: GPT-2 and BERT split Megatron's way.

Each attention block's query/key/value projection becomes column-parallel (each
rank computes its own heads) and its output projection row-parallel; each MLP's
first layer column-parallel and its second row-parallel; the token embedding
vocab-parallel (GPT-2's tied head then gives each rank its vocab shard of the
logits). So a block makes two all-reduces in its forward pass. The model is
first built whole, so its full weights are those of the unsharded model after
the same tk.manual_seed, and every layer keeps its shard of them.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..distributed import world_size
from ..nn.parallel import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, tensor_parallel_group


def _check_heads(heads: int, parts: int, model: str) -> None:
    if heads % parts:
        raise ShapeError(f"{model}: {heads} attention heads do not split over tensor_parallel={parts} ranks")


def shard_gpt2(model, size: int) -> None:
    """Split a GPT2LMHeadModel in place over groups of `size` ranks."""
    group = tensor_parallel_group(size)
    parts, c, t = world_size(group), model.config, model.transformer
    _check_heads(c.n_head, parts, "GPT-2")
    embd = c.n_embd
    t.wte = VocabParallelEmbedding(c.vocab_size, embd, group, full_weight=t.wte.weight)
    for block in t.h:
        attn, mlp = block.attn, block.mlp
        attn.c_attn = ColumnParallelLinear(embd, 3 * embd, gather_output=False, group=group, interleave=3,
                                           transposed=True, full_weight=attn.c_attn.weight,
                                           full_bias=attn.c_attn.bias)
        attn.c_proj = RowParallelLinear(embd, embd, group=group, transposed=True, full_weight=attn.c_proj.weight,
                                        full_bias=attn.c_proj.bias)
        attn.heads, attn.embd = attn.heads // parts, attn.embd // parts
        mlp.c_fc = ColumnParallelLinear(embd, 4 * embd, gather_output=False, group=group, transposed=True,
                                        full_weight=mlp.c_fc.weight, full_bias=mlp.c_fc.bias)
        mlp.c_proj = RowParallelLinear(4 * embd, embd, group=group, transposed=True, full_weight=mlp.c_proj.weight,
                                       full_bias=mlp.c_proj.bias)


def shard_bert(model, size: int) -> None:
    """Split a BertModel in place over groups of `size` ranks."""
    group = tensor_parallel_group(size)
    parts, c = world_size(group), model.config
    _check_heads(c.num_attention_heads, parts, "BERT")
    hidden, inner = c.hidden_size, c.intermediate_size
    embeddings = model.embeddings
    embeddings.word_embeddings = VocabParallelEmbedding(c.vocab_size, hidden, group,
                                                        full_weight=embeddings.word_embeddings.weight)
    for layer in model.encoder.layer:
        attention = getattr(layer.attention, "self")
        for name in ("query", "key", "value"):
            full = getattr(attention, name)
            setattr(attention, name, ColumnParallelLinear(hidden, hidden, gather_output=False, group=group,
                                                          full_weight=full.weight, full_bias=full.bias))
        attention.heads //= parts
        dense = layer.attention.output.dense
        layer.attention.output.dense = RowParallelLinear(hidden, hidden, group=group, full_weight=dense.weight,
                                                         full_bias=dense.bias)
        dense = layer.intermediate.dense
        layer.intermediate.dense = ColumnParallelLinear(hidden, inner, gather_output=False, group=group,
                                                        full_weight=dense.weight, full_bias=dense.bias)
        dense = layer.output.dense
        layer.output.dense = RowParallelLinear(inner, hidden, group=group, full_weight=dense.weight,
                                               full_bias=dense.bias)
