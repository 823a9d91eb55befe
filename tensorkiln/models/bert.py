"""A BERT encoder (Devlin et al. 2019) with Hugging Face's BertModel parameter names."""
from __future__ import annotations

from dataclasses import dataclass

from .. import nn
from ..frontend.creation import arange, zeros
from ..nn import functional as F
from .tensor_parallel import shard_bert


@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT model; the defaults are BERT-base."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        # as Hugging Face's: the positions of the longest sequence, sliced to each input's length (a
        # slice keeps a symbolic sequence length symbolic; arange of it would need its value)
        self.register_buffer("position_ids", arange(c.max_position_embeddings), persistent=False)

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[:input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads, self.head_dim = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x, mask):
        b, s, h = x.shape
        split = lambda t: t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)), mask)
        return out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)  # this rank's heads


class BertSelfOutput(nn.Module):
    def __init__(self, c: BertConfig, inner: int | None = None):
        super().__init__()
        self.dense = nn.Linear(inner or c.hidden_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, hidden, residual):
        return self.LayerNorm(self.dense(hidden) + residual)


class BertAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        setattr(self, "self", BertSelfAttention(c))  # Hugging Face's name for it
        self.output = BertSelfOutput(c)

    def forward(self, x, mask):
        return self.output(getattr(self, "self")(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSelfOutput(c, c.intermediate_size)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertModel(nn.Module):
    """BERT encoder: forward(input_ids, token_type_ids=None, attention_mask=None) -> last hidden state.

    tensor_parallel=n splits it over groups of n MPI ranks (models/tensor_parallel.py).
    """

    def __init__(self, config: BertConfig = BertConfig(), tensor_parallel: int = 1):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        if tensor_parallel != 1:
            shard_bert(self, tensor_parallel)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        if token_type_ids is None:
            token_type_ids = zeros(*input_ids.shape, dtype="int64")
        mask = None
        if attention_mask is not None:  # (N, S) with 1 = attend; broadcast over heads and queries
            b, s = attention_mask.shape
            mask = attention_mask.reshape(b, 1, 1, s) != 0
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)


def bert_base(tensor_parallel: int = 1) -> BertModel:
    """BERT-base (110M parameters) with PyTorch's default initialization, seeded by tk.manual_seed."""
    return BertModel(BertConfig(), tensor_parallel)

