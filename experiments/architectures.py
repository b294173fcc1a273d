"""The architectures of ``models.py``, in plain PyTorch (no torchvision, no downloads).

Three families, each the published architecture:

- ResNet (He et al.), laid out as torchvision's: ``BasicBlock`` (resnet18) and
  ``Bottleneck`` (resnet50, stride on the 3x3), a 7x7 stem with max pooling, a
  global average pool and one fully connected layer. ``width`` is the base
  channel count (64 in the paper), so small versions keep every layer.
- MobileNetV2 (Sandler et al.), as torchvision's: inverted residuals
  (1x1 expand, 3x3 depthwise, 1x1 linear projection), ReLU6, channels scaled by
  ``width_mult`` and rounded to multiples of 8.
- A BERT-style encoder stack: post-LayerNorm blocks of multi-head
  self-attention (written out: MatMul, scale, Softmax, MatMul) and a GELU (erf
  form) feed-forward network. Its input is the hidden states ``(batch, seq,
  hidden)``: the token embedding (a Gather) is left out.

``models.py`` gives them sizes (full, and small for the tests), seeded random
weights and calibrated norm statistics, and exports them to ONNX.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "Encoder",
    "EncoderLayer",
    "InvertedResidual",
    "MobileNetV2",
    "ResNet",
    "SelfAttention",
]


# ----------------------------------------------------------------------------- ResNet


def _conv3x3(cin: int, cout: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and the identity (or a strided 1x1 projection) added before the last ReLU."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4, and the residual (torchvision's "ResNet V1.5")."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with base width ``width`` (stages of width, 2, 4 and 8 times it)."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        num_classes: int = 1000,
        width: int = 64,
    ):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(block, width, layers[0], 1)
        self.layer2 = self._stage(block, width * 2, layers[1], 2)
        self.layer3 = self._stage(block, width * 4, layers[2], 2)
        self.layer4 = self._stage(block, width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(
        self, block: type[BasicBlock] | type[Bottleneck], width: int, blocks: int, stride: int
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != width * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, width * block.expansion, stride),
                nn.BatchNorm2d(width * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = width * block.expansion
        layers += [block(self.inplanes, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -------------------------------------------------------------------------- MobileNetV2


def _make_divisible(v: float, divisor: int = 8) -> int:
    """Round to the nearest multiple of ``divisor``, never more than 10% down (torchvision's rule)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_relu6(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    pad = (kernel - 1) // 2
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, pad, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """1x1 expand (skipped at ratio 1), 3x3 depthwise, 1x1 linear projection; residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = round(cin * expand_ratio)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(cin, hidden, 1))
        layers += [
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2; ``last_channel`` None keeps torchvision's 1280 (scaled up only)."""

    # expansion t, channels c, repeats n, first stride s
    SETTINGS = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(
        self, num_classes: int = 1000, width_mult: float = 1.0, last_channel: int | None = None
    ):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        if last_channel is None:
            last_channel = _make_divisible(1280 * max(1.0, width_mult))
        layers: list[nn.Module] = [_conv_bn_relu6(3, cin, 3, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(_conv_bn_relu6(cin, last_channel, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------------------------ Encoder


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: softmax(Q K^T / sqrt(d)) V, heads split by Reshape/Transpose.

    The reshapes keep the batch as -1 and everything else literal, so the
    exported graph has constant Reshape shapes and no Shape arithmetic. With
    ``dynamic_seq`` they read the batch and sequence from the input instead
    (exported as Shape, Gather and Concat), as a model with a symbolic
    sequence length needs.
    """

    def __init__(self, hidden: int, heads: int, dynamic_seq: bool = False):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.dynamic_seq = dynamic_seq
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor, batch: Any, seq: Any) -> torch.Tensor:
        return x.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dynamic_seq:  # traced sizes: Shape arithmetic in the export
            batch, seq = x.shape[0], x.shape[1]
        else:  # Python ints: traced as constants
            batch, seq = -1, int(x.shape[1])
        q = self._split(self.query(x), batch, seq)
        k = self._split(self.key(x), batch, seq)
        v = self._split(self.value(x), batch, seq)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.transpose(1, 2).reshape(batch, seq, self.hidden))


class EncoderLayer(nn.Module):
    """One BERT layer: attention, residual, LayerNorm; GELU feed-forward, residual, LayerNorm."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float = 1e-12):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.gelu = nn.GELU()  # the erf form
        self.ffn_out = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn_out(self.gelu(self.ffn_in(x))))


class Encoder(nn.Module):
    """A stack of ``layers`` BERT layers over hidden states ``(batch, seq, hidden)``."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 4):
        super().__init__()
        self.layers = nn.Sequential(*(EncoderLayer(hidden, heads, ffn) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)
