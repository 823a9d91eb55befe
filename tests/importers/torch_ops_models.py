"""Small PyTorch modules that together use the ATen ops the lowering table covers (op-coverage tests)."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


class Elementwise(nn.Module):
    def forward(self, x, y):
        a = F.silu(x) + F.hardswish(x) - F.leaky_relu(x, 0.2) * F.elu(x) + F.hardsigmoid(x)
        b = F.gelu(x, approximate="tanh") + F.gelu(y) + torch.sigmoid(y) * torch.tanh(x) + F.relu6(x * 4)
        c = x.abs().sqrt() + (y.abs() + 1).rsqrt() + x.exp().log1p() + (y.abs() + 0.5).log() + torch.erf(x) - x.neg()
        d = x.pow(3) + y.pow(2) + torch.clamp(x, -0.5, 0.5) + torch.maximum(x, y) + torch.minimum(x, y)
        e = torch.where(x > y, x, y) + x.masked_fill(y < 0, -1.0) + torch.div(x, 2) - torch.sub(x, y, alpha=2)
        f = torch.add(x, y, alpha=0.5) + 1.5 - (2 - x) + x / (y.abs() + 1) + torch.floor_divide(x * 8, 3)
        g = (x.eq(y) | x.ne(0) & x.lt(1) ^ x.gt(0)).float() + x.le(0).logical_and(x.ge(-1)).float() \
            + (~(x > 0)).float() + torch.logical_or(x > 0, y > 0).float()
        h = F.softmax(x, -1) + F.log_softmax(y, 0) + torch.tril(x) + torch.triu(y, 1)
        return a, b, c, d, e, f, g, h


class Movement(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 6)

    def forward(self, x, ids):
        v = x.view(2, 3, 4).permute(2, 0, 1).reshape(4, 6).t().contiguous()            # (6, 4)
        w = v.unsqueeze(0).expand(3, 6, 4).transpose(0, 1).clone()                     # (6, 3, 4)
        a, b = w.chunk(2, dim=-1)
        p, q, r = torch.split(w, [1, 1, 1], dim=1)
        cat = torch.cat([a, b, p.squeeze(1).unsqueeze(-1).expand(6, 4, 2).sum(-1, keepdim=True)[:, :3]], -1)
        s = cat[1:5:2, :, 1:] + cat[:, 0, 1:].unsqueeze(1)[2:4]
        emb = self.embedding(ids) + torch.index_select(x, 0, ids[0, :2] % 4).sum() * 0.1
        gathered = torch.gather(x, 1, ids % 4)
        stacked = torch.stack([q.squeeze(1), r.squeeze(1)], 0).flip(0)
        full = torch.full((2, 2), 3.0) + torch.ones(2, 2) + torch.zeros_like(x[:2, :2]) + torch.arange(2.0)
        rows = x[ids[0, :1] % 4] + x[torch.tensor([1, 0])].sum(0)
        pad = F.pad(x, (1, 2, 0, 1), value=-1.0)
        return s, emb, gathered, stacked, full, x.to(torch.float64) * 2, ids.float(), rows, pad, x.repeat(2, 1)


class Reductions(nn.Module):
    def forward(self, x):
        values, indices = x.max(-1)
        return (x.sum(), x.sum((0, 2)), x.mean(1, keepdim=True), x.amax((1, 2)), x.amin(0), x.var(-1),
                x.var((0, 1), unbiased=False), x.std(0), values, indices, x.argmin(1), (x > 0).any(-1),
                (x > -3).all(), x.prod(-1), torch.nn.functional.normalize(x, dim=-1))


class Convolutions(nn.Module):
    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(4, 8, 3, stride=2, padding=2, dilation=2, groups=2)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.pointwise = nn.Conv2d(8, 6, 1)
        self.transposed = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.conv1d = nn.Conv1d(4, 5, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.ln = nn.LayerNorm([6])

    def forward(self, x):
        y = F.hardtanh(self.bn(self.grouped(x)), -2.0, 2.0)
        y = self.pointwise(F.relu(self.depthwise(y)))
        z = self.transposed(y)
        pooled = (F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2, ceil_mode=True,
                  count_include_pad=False), F.adaptive_avg_pool2d(x, (3, 5)), F.max_pool2d(x, 2, return_indices=True)[1])
        seq = self.conv1d(x.mean(-1))
        return (z, self.ln(y.permute(0, 2, 3, 1)), seq) + pooled


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, bool_mask, float_mask):
        q = x.view(2, 5, 4, 4).transpose(1, 2)
        causal = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        masked = F.scaled_dot_product_attention(q, q * 0.5, q, attn_mask=bool_mask)
        biased = F.scaled_dot_product_attention(q, q, q, attn_mask=float_mask, scale=0.3)
        out, _ = self.mha(x, x, x, need_weights=False)
        return causal, masked, biased, out


def elementwise_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)


def movement_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 6, generator=g), torch.randint(0, 10, (2, 6), generator=g)


def reductions_inputs(seed=0):
    return (torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(seed)),)


def convolutions_inputs(seed=0):
    return (torch.randn(2, 4, 9, 11, generator=torch.Generator().manual_seed(seed)),)


def attention_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 16, generator=g)
    bool_mask = torch.rand(5, 5, generator=g) > 0.3
    bool_mask[:, 0] = True  # no fully masked row
    return x, bool_mask, torch.randn(2, 1, 5, 5, generator=g)


def seeded(cls, seed: int = 0) -> nn.Module:
    """An instance of `cls` with weights (and batch-norm statistics) from a fixed seed, in eval mode."""
    torch.manual_seed(seed)
    module = cls()
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return module.eval()
