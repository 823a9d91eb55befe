"""Run on 2 ranks: tensor-parallel layers, GPT-2 and BERT compute what the unsharded ones do.

The sharded model and the unsharded one are built after the same tk.manual_seed; logits,
greedy tokens, gradients (through the vocab-parallel cross-entropy) and checkpoints (saved at
one degree, loaded at the other) must agree.
"""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
import tensorkiln.nn.functional as F
from tensorkiln import nn
from tensorkiln.models import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
from tensorkiln.nn.parallel import (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding,
                                    full_state_dict, load_full_state_dict, vocab_parallel_cross_entropy)

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()


def close(what, got, want, rtol=1e-5, atol=1e-6):
    got = got.numpy() if isinstance(got, tk.Tensor) else np.asarray(got)
    want = want.numpy() if isinstance(want, tk.Tensor) else np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"rank {RANK}: {what}")


def built(make, seed=0):
    tk.manual_seed(seed)
    return make()


rng = np.random.default_rng(0)
x = tk.tensor(rng.standard_normal((3, 5, 12)).astype(np.float32))

# layers, against their unsharded counterparts drawn from the same seed
close("column", built(lambda: ColumnParallelLinear(12, 10))(x), built(lambda: nn.Linear(12, 10))(x))
close("row", built(lambda: RowParallelLinear(12, 7, input_is_parallel=False))(x), built(lambda: nn.Linear(12, 7))(x))
ids = tk.tensor(rng.integers(0, 11, (4, 6)))
close("vocab embedding (11 rows: padded)", built(lambda: VocabParallelEmbedding(11, 5))(ids),
      built(lambda: nn.Embedding(11, 5))(ids))

# GPT-2 with a vocabulary that does not split evenly
config = GPT2Config(vocab_size=101, n_positions=16, n_embd=32, n_layer=2, n_head=4)
full = built(lambda: GPT2LMHeadModel(config))
sharded = built(lambda: GPT2LMHeadModel(config, tensor_parallel=SIZE))
assert sharded.transformer.h[0].mlp.c_fc.weight.shape == (32, 128 // SIZE)
tokens = tk.tensor(rng.integers(0, 101, (2, 7)))
want = full(tokens)
close("gpt2 logits", sharded(tokens), want)
compiled = tk.jit(sharded)
close("gpt2 logits compiled", compiled(tokens), want, rtol=1e-4, atol=1e-5)
assert compiled.report(tokens).backend == "c"
np.testing.assert_array_equal(sharded.generate(tokens.numpy(), 4), full.generate(tokens.numpy(), 4))


def greedy_matches_argmax(full_weight, rows, what):
    """The vocab-parallel greedy token, eager and compiled, is the first argmax of the gathered logits."""
    layer = VocabParallelEmbedding(full_weight.shape[0], full_weight.shape[1], full_weight=full_weight)
    want = (rows @ full_weight.T).argmax(-1)
    for how, greedy in (("eager", layer.greedy), ("compiled", tk.jit(layer.greedy))):
        got = greedy(tk.tensor(rows)).numpy()
        assert got.dtype == np.int64 and (got == want).all(), (RANK, what, how, got, want)


weight = rng.standard_normal((11, 5)).astype(np.float32)  # 11 rows: the last shard is padded
greedy_matches_argmax(weight, rng.standard_normal((4, 3, 5)).astype(np.float32), "random")
negative = -np.abs(weight)  # every logit below 0: a padding row (logit 0) must not win
greedy_matches_argmax(negative, np.abs(rng.standard_normal((2, 5))).astype(np.float32), "negative logits")
tied = weight.copy()
tied[9] = tied[2] = 3 * np.ones(5, np.float32)  # the same largest logit on two ranks: the first index wins
greedy_matches_argmax(tied, np.ones((3, 5), np.float32), "tie across ranks")

# the compiled greedy decode step: the argmax of the compiled step's logits, on every rank
length = 7 + 3
logits, caches = tk.jit(sharded.prefill)(tokens, length)
token = tk.tensor(logits[:, -1].argmax(-1).numpy().reshape(-1, 1))
_, full_caches = full.prefill(tokens, length)
step, greedy_step = tk.jit(sharded.decode_step), tk.jit(sharded.decode_greedy_step)
for i in range(3):
    position = tk.tensor(np.int64(7 + i))
    logits, _ = step(token, position, caches)
    full_logits, full_caches = full.decode_step(token, position, full_caches)
    close(f"gpt2 decode step {i} logits", logits, full_logits, rtol=1e-4, atol=1e-5)
    following, caches = greedy_step(token, position, caches)
    assert following.shape == (2, 1) and following.dtype == tk.int64
    np.testing.assert_array_equal(following.numpy(), full_logits.numpy()[:, -1].argmax(-1).reshape(2, 1))
    token = following

# gradients: the vocab-parallel cross-entropy on the logits' shards against the full model's
targets = tk.tensor(rng.integers(0, 101, (2, 7)))
F.cross_entropy(full(tokens).reshape(14, 101), targets.reshape(14)).backward()
wte = sharded.transformer.wte
hidden = sharded.transformer.wte(tokens) + sharded.transformer.wpe(tk.arange(7))
for block in sharded.transformer.h:
    hidden, _ = block(hidden)
local_logits = wte.logits(sharded.transformer.ln_f(hidden), gather=False)
vocab_parallel_cross_entropy(local_logits.reshape(14, -1), targets.reshape(14), wte.vocab_start,
                             101).backward()
for name in ("transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "transformer.h.1.mlp.c_fc"):
    part = dict(sharded.named_modules())[name]
    whole = dict(full.named_modules())[name]
    close(f"grad {name}", part.weight.grad, part.shards["weight"].split(whole.weight.grad.numpy(), RANK),
          rtol=1e-4, atol=1e-6)
close("grad wte", wte.weight.grad, wte.shards["weight"].split(full.transformer.wte.weight.grad.numpy(), RANK),
      rtol=1e-4, atol=1e-6)
close("grad ln_f", sharded.transformer.ln_f.weight.grad, full.transformer.ln_f.weight.grad, rtol=1e-4, atol=1e-6)

# checkpoints: full weights from the sharded model, and back into a differently seeded one
state = full_state_dict(sharded)
assert sorted(state) == sorted(full.state_dict())
for key, value in full.state_dict().items():
    np.testing.assert_array_equal(state[key], value.numpy(), err_msg=key)
other = built(lambda: GPT2LMHeadModel(config, tensor_parallel=SIZE), seed=7)
load_full_state_dict(other, full.state_dict())
close("gpt2 logits after loading an unsharded checkpoint", other(tokens), want)
unsharded = built(lambda: GPT2LMHeadModel(config), seed=9)
unsharded.load_state_dict(state)
close("unsharded model from a sharded checkpoint", unsharded(tokens), want)

# BERT
bert_config = BertConfig(vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=40, max_position_embeddings=16)
words = tk.tensor(rng.integers(0, 50, (2, 9)))
mask = tk.tensor((rng.random((2, 9)) > 0.2).astype(np.int64))
close("bert hidden states", built(lambda: BertModel(bert_config, tensor_parallel=SIZE))(words, attention_mask=mask),
      built(lambda: BertModel(bert_config))(words, attention_mask=mask))
print(f"OK tensor_parallel rank {RANK}")
