"""GPT-2 (Radford et al. 2019) with Hugging Face's GPT2LMHeadModel names, and a KV-cache decoder.

Decoding keeps, per layer, keys and values of shape (batch, heads, max_len,
head_dim). A step writes the new token's key and value at position `pos`
(a select against the position index, so `pos` is a tensor and one compiled
step serves every position) and attends to positions <= pos. Prefill runs the
prompt through causal attention and fills the first positions of the cache.
`generate` compiles the step with its caches donated (`tk.jit(...,
donate_argnums=2)`): the select then stores only the new row, into the
caches' own arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import nn
from ..errors import ShapeError, at_user_line
from ..frontend.autodiff import no_grad
from ..frontend.creation import arange, randn, tensor, zeros
from ..frontend.functions import where
from ..frontend.jit import jit
from ..nn import functional as F
from ..nn.modules.module import Parameter
from ..nn.parallel import VocabParallelEmbedding
from .tensor_parallel import shard_gpt2


@dataclass(frozen=True)
class GPT2Config:
    """Sizes of a GPT-2 model; the defaults are GPT-2 small (124M)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 linear layer: y = x W + b with W of shape (in, out)."""

    def __init__(self, nx: int, nf: int):
        super().__init__()
        self.weight = Parameter(randn(nx, nf) * 0.02)
        self.bias = Parameter(zeros(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.heads, self.head_dim, self.embd = c.n_head, c.n_embd // c.n_head, c.n_embd
        self.c_attn = Conv1D(c.n_embd, 3 * c.n_embd)
        self.c_proj = Conv1D(c.n_embd, c.n_embd)

    def _qkv(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.embd, dim=2)
        split = lambda t: t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        return split(q), split(k), split(v)

    def _merge(self, out):
        b, _, s, _ = out.shape
        return self.c_proj(out.transpose(1, 2).reshape(b, s, self.embd))

    def forward(self, x):
        q, k, v = self._qkv(x)
        return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True)), (k, v)

    def step(self, x, pos, cache_k, cache_v):
        """One token: write its key/value at `pos`, attend to positions <= pos."""
        q, k, v = self._qkv(x)
        length = cache_k.shape[2]
        slot = (arange(length) == pos).reshape(1, 1, length, 1)
        cache_k, cache_v = where(slot, k, cache_k), where(slot, v, cache_v)
        visible = (arange(length) <= pos).reshape(1, 1, 1, length)
        out = F.scaled_dot_product_attention(q, cache_k, cache_v, visible)
        return self._merge(out), cache_k, cache_v


class GPT2MLP(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.c_fc = Conv1D(c.n_embd, 4 * c.n_embd)
        self.c_proj = Conv1D(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)
        self.mlp = GPT2MLP(c)

    def forward(self, x):
        attended, kv = self.attn(self.ln_1(x))
        x = x + attended
        return x + self.mlp(self.ln_2(x)), kv

    def step(self, x, pos, cache_k, cache_v):
        attended, cache_k, cache_v = self.attn.step(self.ln_1(x), pos, cache_k, cache_v)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), cache_k, cache_v


class GPT2Model(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.n_positions, c.n_embd)
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd, eps=c.layer_norm_epsilon)


class GPT2LMHeadModel(nn.Module):
    """GPT-2 with its language-model head tied to the token embedding.

    tensor_parallel=n splits it over groups of n MPI ranks (models/tensor_parallel.py): each rank
    holds its shard of the same full weights and computes the same logits.
    """

    def __init__(self, config: GPT2Config = GPT2Config(), tensor_parallel: int = 1):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        if tensor_parallel != 1:
            shard_gpt2(self, tensor_parallel)

    def _logits(self, x):
        wte = self.transformer.wte
        if isinstance(wte, VocabParallelEmbedding):
            return wte.logits(x)
        return x @ wte.weight.transpose(0, 1)

    def _greedy(self, x):
        """The next token (N, 1) int64 of each sequence: the argmax of the last position's logits (over
        the vocabulary split across the ranks, no logits gathered, when the head is vocab-parallel)."""
        last = x[:, -1:]
        wte = self.transformer.wte
        if isinstance(wte, VocabParallelEmbedding):
            return wte.greedy(last)
        return self._logits(last).argmax(-1)

    def forward(self, input_ids):
        """Logits (N, S, vocab) for every position (causal attention)."""
        return self.prefill(input_ids, input_ids.shape[1])[0]

    def prefill(self, input_ids, max_len: int):
        """Logits of the prompt and the KV cache sized for `max_len` positions."""
        t = self.transformer
        s = input_ids.shape[1]
        self._check_positions("prompt", s)
        self._check_positions("KV cache", max_len)
        x = t.wte(input_ids) + t.wpe(arange(s))
        caches = []
        for block in t.h:
            x, (k, v) = block(x)
            pad = (0, 0, 0, max_len - s)
            caches += [F.pad(k, pad), F.pad(v, pad)]
        return self._logits(t.ln_f(x)), caches

    def decode_step(self, token, pos, caches):
        """Logits (N, 1, vocab) of one new token at position `pos` (a 0-d int64 tensor), new caches."""
        x, new = self._decode_hidden(token, pos, caches)
        return self._logits(x), new

    def decode_greedy_step(self, token, pos, caches):
        """The greedy next token (N, 1) int64 after `token` (N, 1) at position `pos`, and the new caches:
        decode_step with the argmax taken inside, so a compiled step hands back one index per sequence
        (on several ranks without gathering the vocabulary's logits) and its result is the next call's
        token as it is."""
        x, new = self._decode_hidden(token, pos, caches)
        return self._greedy(x), new

    def _decode_hidden(self, token, pos, caches):
        """The final layer norm's output (N, 1, n_embd) for one new token, and the new caches."""
        t = self.transformer
        self._check_positions("KV cache", caches[0].shape[2])
        x = t.wte(token) + t.wpe(pos.reshape(1))
        new = []
        for i, block in enumerate(t.h):
            x, k, v = block.step(x, pos, caches[2 * i], caches[2 * i + 1])
            new += [k, v]
        return t.ln_f(x), new

    def _check_positions(self, what: str, length) -> None:
        """A length past the position table is an error; a symbolic length keeps the guard length <= n_positions."""
        if length > self.config.n_positions:
            raise ShapeError(at_user_line(f"GPT-2: a {what} of {length} positions is longer than the model's "
                                          f"{self.config.n_positions} (n_positions)"))

    def generate(self, input_ids, max_new_tokens: int, compiled: bool = True) -> np.ndarray:
        """Greedy decoding with the KV cache: prefill once, then one compiled step per token.

        Runs without gradients, so the compiled prefill and step hold the weights as constants.
        """
        with no_grad():
            return self._generate(input_ids, max_new_tokens, compiled)

    def _generate(self, input_ids, max_new_tokens: int, compiled: bool) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.int64)
        length = ids.shape[1] + max_new_tokens
        prefill = jit(self.prefill) if compiled else self.prefill
        # the caches are donated: each step writes its token's keys and values into them in place
        step = jit(self.decode_greedy_step, donate_argnums=2) if compiled else self.decode_greedy_step
        logits, caches = prefill(tensor(ids), length)
        token = tensor(logits[:, -1].argmax(-1).numpy().reshape(-1, 1))
        tokens = [ids]
        for i in range(max_new_tokens):
            tokens.append(token.numpy())
            if i == max_new_tokens - 1:
                break
            token, caches = step(token, tensor(np.int64(ids.shape[1] + i)), caches)
        return np.concatenate(tokens, axis=1)

    def load_hf_state_dict(self, state_dict) -> None:
        """Load a Hugging Face GPT2LMHeadModel state_dict (tied lm_head and attention masks are skipped)."""
        own = self.state_dict()
        filtered = {k: v for k, v in state_dict.items() if k in own}
        self.load_state_dict(filtered)

