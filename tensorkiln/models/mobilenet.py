"""MobileNetV2 (Sandler et al. 2018) with torchvision's module names."""
from __future__ import annotations

from .. import nn
from ..nn import functional as F


class ReLU6(nn.Module):
    """min(max(x, 0), 6)."""

    def forward(self, x):
        return F.relu6(x)


def conv_bn_relu6(in_channels: int, out_channels: int, kernel: int = 3, stride: int = 1, groups: int = 1):
    """torchvision's Conv2dNormActivation: conv (no bias), batch norm, ReLU6."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False), nn.BatchNorm2d(out_channels), ReLU6())


class InvertedResidual(nn.Module):
    """1x1 expansion, 3x3 depthwise, 1x1 linear projection; residual when shapes allow."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = in_channels * expand_ratio
        self.use_residual = stride == 1 and in_channels == out_channels
        layers = [conv_bn_relu6(in_channels, hidden, 1)] if expand_ratio != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv(x)
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0) for (N, 3, H, W) images."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))  # expansion t, channels c, repeats n, first stride s

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        features = [conv_bn_relu6(3, 32, 3, 2)]
        channels = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                channels = c
        features.append(conv_bn_relu6(channels, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)
