"""Reference PyTorch models, written in plain torch.nn (torchvision is not needed): ResNet-18,
MobileNetV2, a BERT-style encoder and the MLP, with seeded random weights and non-trivial batch-norm
statistics. The defaults are small (for tests); `tensorkiln bench` builds the full sizes. Needs torch."""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


# ---- ResNet-18 -----------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision's resnet18 layout: [2, 2, 2, 2] basic blocks, widths 64..512."""

    def __init__(self, num_classes: int = 10, width: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], width
        for i, planes in enumerate([width, width * 2, width * 4, width * 8]):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- MobileNetV2 -----------------------------------------------------------------------------

def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class ConvBNReLU(nn.Sequential):
    def __init__(self, inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == out
        layers = [] if expand_ratio == 1 else [ConvBNReLU(inp, hidden, kernel=1)]
        layers += [ConvBNReLU(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, out, 1, 1, 0, bias=False), nn.BatchNorm2d(out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's mobilenet_v2 layout (width multiplier `width_mult`)."""

    def __init__(self, num_classes: int = 10, width_mult: float = 0.5):
        super().__init__()
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2],
                    [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]
        inp = _divisible(32 * width_mult)
        self.last_channel = _divisible(1280 * max(1.0, width_mult))
        features = [ConvBNReLU(3, inp, stride=2)]
        for t, c, n, s in settings:
            out = _divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(inp, out, s if i == 0 else 1, t))
                inp = out
        features.append(ConvBNReLU(inp, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---- BERT-style encoder ------------------------------------------------------------------------

class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, use_sdpa: bool):
        super().__init__()
        self.heads, self.head_dim, self.use_sdpa = heads, hidden // heads, use_sdpa
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split_heads(self.query(x)), self.split_heads(self.key(x)), self.split_heads(self.value(x))
        if self.use_sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + mask
            ctx = self.dropout(scores.softmax(-1)) @ v
        b, _, s, _ = ctx.shape
        return ctx.transpose(1, 2).contiguous().view(b, s, -1)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, use_sdpa: bool):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, use_sdpa)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask):
        x = self.attn_norm(x + self.dropout(self.attn_out(self.attention(x, mask))))
        return self.out_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class BertEncoder(nn.Module):
    """BERT: word + position + token-type embeddings, LayerNorm, N encoder layers, a pooler and a classifier.

    forward(input_ids (B, S) int64, attention_mask (B, S) int64 of 0/1) -> logits (B, num_classes)."""

    def __init__(self, vocab: int = 100, hidden: int = 64, layers: int = 2, heads: int = 4,
                 intermediate: int = 128, max_positions: int = 64, num_classes: int = 3, use_sdpa: bool = True):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, intermediate, use_sdpa) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, input_ids, attention_mask):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.dropout(self.norm(x))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


def _randomize_batchnorm(model: nn.Module, generator: torch.Generator) -> None:
    """Non-trivial running statistics and affine parameters, so BN folding is really tested."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=generator) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=generator) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=generator) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=generator) * 0.1)


def resnet18(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = ResNet18()
    _randomize_batchnorm(model, torch.Generator().manual_seed(seed))
    return model.eval()


def mobilenet_v2(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = MobileNetV2()
    _randomize_batchnorm(model, torch.Generator().manual_seed(seed))
    return model.eval()


def resnet18_full(seed: int = 0) -> nn.Module:
    """ResNet-18 at its real size (1000 classes)."""
    torch.manual_seed(seed)
    model = ResNet18(num_classes=1000)
    _randomize_batchnorm(model, torch.Generator().manual_seed(seed))
    return model.eval()


def mobilenet_v2_full(seed: int = 0) -> nn.Module:
    """MobileNetV2 at its real size (width 1.0, 1000 classes)."""
    torch.manual_seed(seed)
    model = MobileNetV2(num_classes=1000, width_mult=1.0)
    _randomize_batchnorm(model, torch.Generator().manual_seed(seed))
    return model.eval()


def bert_encoder(seed: int = 0, use_sdpa: bool = True) -> nn.Module:
    torch.manual_seed(seed)
    return BertEncoder(use_sdpa=use_sdpa).eval()


class MLP(nn.Module):
    """Linear-ReLU-Linear-ReLU-Linear (784-512-512-10 by default)."""

    def __init__(self, sizes=(784, 512, 512, 10)):
        super().__init__()
        layers = []
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if k < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def image(batch: int = 1, size: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def bert_inputs(batch: int = 2, seq: int = 16, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - 3:] = 0  # padding in the last sequence
    return ids, mask


# ---- GPT-2 (Hugging Face's parameter names, Conv1D layers) ----------------------------------

class Conv1D(nn.Module):
    """y = x W + b with W of shape (in, out), as Hugging Face's GPT-2."""

    def __init__(self, nx: int, nf: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.heads, self.embd = heads, embd
        self.c_attn, self.c_proj = Conv1D(embd, 3 * embd), Conv1D(embd, embd)

    def forward(self, x, past=None, position: int | None = None):
        """past: the cache so far, concatenated with this step's keys and values; or, with `position`,
        preallocated caches (b, heads, length, d) that this step's keys and values are written into
        in place at `position` (a static cache: no new tensors per token)."""
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.embd, dim=2)
        split = lambda t: t.reshape(b, s, self.heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        if position is not None:
            past[0][:, :, position:position + s] = k
            past[1][:, :, position:position + s] = v
            k, v = past[0][:, :, :position + s], past[1][:, :, :position + s]
        elif past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.c_proj(out.transpose(1, 2).reshape(b, s, self.embd)), (k, v)


class GPT2Block(nn.Module):
    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(embd), GPT2Attention(embd, heads)
        self.ln_2 = nn.LayerNorm(embd)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = Conv1D(embd, 4 * embd), Conv1D(4 * embd, embd)

    def forward(self, x, past=None, position: int | None = None):
        attended, present = self.attn(self.ln_1(x), past, position)
        x = x + attended
        h = self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + h, present


class GPT2(nn.Module):
    """GPT-2 with a KV cache: forward(ids, past=None, start=0) -> (logits, presents), the cache grown by
    concatenation; decode_static(ids, caches, position) -> logits, a preallocated cache written in place."""

    def __init__(self, vocab: int = 50257, positions: int = 1024, embd: int = 768, layers: int = 12, heads: int = 12):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte, self.transformer.wpe = nn.Embedding(vocab, embd), nn.Embedding(positions, embd)
        self.transformer.h = nn.ModuleList([GPT2Block(embd, heads) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(embd)

    def forward(self, ids, past=None, start: int = 0):
        t = self.transformer
        x = t.wte(ids) + t.wpe(torch.arange(start, start + ids.shape[1]))
        presents = []
        for i, block in enumerate(t.h):
            x, present = block(x, None if past is None else past[i])
            presents.append(present)
        return t.ln_f(x) @ t.wte.weight.T, presents

    def decode_static(self, ids, caches, position: int):
        """One decode step with preallocated caches [(k, v)] of shape (b, heads, length, d), written in
        place at `position` (tensorkiln's decode step does the same with its donated caches): logits."""
        t = self.transformer
        x = t.wte(ids) + t.wpe(torch.arange(position, position + ids.shape[1]))
        for block, cache in zip(t.h, caches):
            x, _ = block(x, cache, position)
        return t.ln_f(x) @ t.wte.weight.T
