"""Whole models for the compiler's tests and benchmarks, written in plain PyTorch and exported to ONNX.

    python experiments/models.py resnet18 out/resnet18.onnx
    python experiments/models.py resnet50 out/resnet50.onnx --batch 8
    python experiments/models.py mobilenet_v2 out/mobilenet_v2.onnx
    python experiments/models.py encoder out/encoder.onnx --layers 4 --seq 128
    python experiments/models.py encoder tests/models/data/encoder_small.onnx --small --dynamic-batch
    python experiments/models.py encoder out/encoder_dynamic.onnx --dynamic-batch --dynamic-seq

Three families, each the published architecture with random weights (no
torchvision, no downloads):

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

Weights are drawn from a fixed seed; batch-norm statistics are then calibrated
on one random batch (the running mean and variance of that batch, scale and
shift drawn near 1 and 0) so that activations stay of order one through the
whole depth, as in a trained network; a freshly initialised network would make
every BatchNormalization an identity and a tolerance check meaningless.

``export`` uses torch's TorchScript-based exporter (``dynamo=False``), which
still ships with torch 2.13 and writes plain default-domain graphs of standard
operators (Conv, BatchNormalization folded into Conv by its constant folding,
Relu, Clip, MaxPool, GlobalAveragePool, Flatten, Gemm, MatMul, Softmax,
LayerNormalization at opset 17, Erf ...). The input is named ``input`` and the
output ``output``; ``dynamic_batch`` makes dimension 0 of both the symbolic
``batch``. The exported model is checked with onnxruntime against torch's own
output before the function returns.
"""

from __future__ import annotations

import argparse
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "MODELS",
    "BasicBlock",
    "Bottleneck",
    "Encoder",
    "MobileNetV2",
    "ResNet",
    "build",
    "check",
    "export",
]

SEED = 0


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


# ------------------------------------------------------------------------------ catalogue


@dataclass(frozen=True)
class Spec:
    """How to make one model and the shape of its input, in full and small size."""

    make: Callable[[bool, int], nn.Module]  # (small, layers) -> module
    input_shape: Callable[[bool, int], tuple[int, ...]]  # (small, seq) -> shape without batch


def _resnet18(small: bool, layers: int) -> nn.Module:
    return (
        ResNet(BasicBlock, (2, 2, 2, 2), num_classes=10, width=8)
        if small
        else ResNet(BasicBlock, (2, 2, 2, 2))
    )


def _resnet50(small: bool, layers: int) -> nn.Module:
    return (
        ResNet(Bottleneck, (3, 4, 6, 3), num_classes=10, width=4)
        if small
        else ResNet(Bottleneck, (3, 4, 6, 3))
    )


def _mobilenet_v2(small: bool, layers: int) -> nn.Module:
    return (
        MobileNetV2(num_classes=10, width_mult=0.25, last_channel=320) if small else MobileNetV2()
    )


def _encoder(small: bool, layers: int) -> nn.Module:
    return Encoder(32, 4, 64, layers) if small else Encoder(768, 12, 3072, layers)


def _image(small: bool, seq: int) -> tuple[int, ...]:
    return (3, 32, 32) if small else (3, 224, 224)


def _tokens(small: bool, seq: int) -> tuple[int, ...]:
    return (seq, 32 if small else 768)


MODELS: dict[str, Spec] = {
    "resnet18": Spec(_resnet18, _image),
    "resnet50": Spec(_resnet50, _image),
    "mobilenet_v2": Spec(_mobilenet_v2, _image),
    "encoder": Spec(_encoder, _tokens),
}


def _calibrate(model: nn.Module, x: torch.Tensor) -> None:
    """Batch-norm statistics from one batch, scale and shift drawn near 1 and 0, LayerNorm's likewise."""
    gen = torch.Generator().manual_seed(SEED + 1)
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm))]
    with torch.no_grad():
        for m in norms:
            m.weight.copy_(1 + 0.2 * (torch.rand(m.weight.shape, generator=gen) - 0.5))
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = 1.0  # running stats := this batch's
        if any(isinstance(m, nn.BatchNorm2d) for m in norms):
            model.train()
            model(x)
    model.eval()


def build(
    name: str,
    *,
    small: bool = False,
    batch: int = 1,
    layers: int | None = None,
    seq: int | None = None,
    dynamic_seq: bool = False,
) -> tuple[nn.Module, torch.Tensor]:
    """The model in eval mode with seeded random weights, and a seeded example input of batch ``batch``.

    >>> model, x = build("resnet18", small=True)
    >>> tuple(model(x).shape)
    (1, 10)
    """
    name, small = _parse_name(name, small)
    spec = MODELS[name]
    n_layers = layers if layers is not None else (2 if small else 4)
    n_seq = seq if seq is not None else (16 if small else 128)
    torch.manual_seed(SEED)
    model = spec.make(small, n_layers)
    for m in model.modules():
        if isinstance(m, SelfAttention):
            m.dynamic_seq = dynamic_seq
    shape = spec.input_shape(small, n_seq)
    gen = torch.Generator().manual_seed(SEED + 2)
    _calibrate(model, torch.randn((max(batch, 4), *shape), generator=gen))
    return model, torch.randn((batch, *shape), generator=gen)


def _parse_name(name: str, small: bool) -> tuple[str, bool]:
    if name.endswith("_small"):
        name, small = name.removesuffix("_small"), True
    if name not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; known: {', '.join(sorted(MODELS))} (and NAME_small)"
        )
    return name, small


def check(
    path: str | os.PathLike[str],
    model: nn.Module,
    x: torch.Tensor,
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> float:
    """Run the ONNX file in onnxruntime on ``x`` and compare with ``model(x)``; the largest absolute error."""
    import onnxruntime as ort

    sess = ort.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return float(np.max(np.abs(got - want)))


def _name_output_dims(
    path: str, model: nn.Module, x: torch.Tensor, symbols: dict[int, str]
) -> None:
    """Write the output's true shape into the file (the exporter names dims it cannot follow, such as
    LayerNormalization's, with made-up symbols); only the dimensions in ``symbols`` stay symbolic."""
    import onnx

    proto = onnx.load(path)
    with torch.no_grad():
        shape = tuple(model(x).shape)
    for i, dim in enumerate(proto.graph.output[0].type.tensor_type.shape.dim):
        if i in symbols:
            dim.dim_param = symbols[i]
        else:
            dim.dim_value = shape[i]
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path)


def export(
    name: str,
    path: str | os.PathLike[str],
    *,
    small: bool = False,
    batch: int = 1,
    opset: int = 17,
    dynamic_batch: bool = False,
    layers: int | None = None,
    seq: int | None = None,
    dynamic_seq: bool = False,
) -> str:
    """Write model ``name`` as ONNX to ``path`` (checked with onnxruntime) and return the path.

    ``name`` is one of :data:`MODELS`, optionally with ``_small`` (same as
    ``small=True``). ``layers`` and ``seq`` apply to the encoder (defaults 4
    and 128; small: 2 and 16). ``dynamic_seq`` (the encoder) makes dimension
    1 of the input and the output the symbol ``seq``.
    """
    if dynamic_seq and not name.startswith("encoder"):
        raise ValueError(f"--dynamic-seq applies to the encoder, not {name}")
    model, x = build(
        name, small=small, batch=batch, layers=layers, seq=seq, dynamic_seq=dynamic_seq
    )
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    symbols = {0: "batch"} if dynamic_batch else {}
    if dynamic_seq:
        symbols[1] = "seq"
    dynamic_axes = {"input": symbols, "output": symbols} if symbols else None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            model,
            (x,),
            path,
            dynamo=False,
            opset_version=opset,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )
    _name_output_dims(path, model, x, symbols)
    check(path, model, x)
    gen = torch.Generator().manual_seed(SEED + 3)
    if dynamic_batch:  # the symbolic batch must really be symbolic
        check(path, model, torch.randn((batch + 2, *x.shape[1:]), generator=gen))
    if dynamic_seq:  # and the sequence
        check(path, model, torch.randn((batch, x.shape[1] + 5, *x.shape[2:]), generator=gen))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of {', '.join(MODELS)} (NAME_small = --small)")
    parser.add_argument("path", help="where to write the .onnx file")
    parser.add_argument("--small", action="store_true", help="the small test version")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--dynamic-batch", action="store_true", help="a symbolic batch dimension")
    parser.add_argument(
        "--dynamic-seq", action="store_true", help="a symbolic sequence length (the encoder)"
    )
    parser.add_argument(
        "--layers", type=int, default=None, help="encoder layers (default 4; small 2)"
    )
    parser.add_argument(
        "--seq", type=int, default=None, help="encoder sequence length (default 128; small 16)"
    )
    args = parser.parse_args(argv)
    try:
        path = export(
            args.name,
            args.path,
            small=args.small,
            batch=args.batch,
            opset=args.opset,
            dynamic_batch=args.dynamic_batch,
            layers=args.layers,
            seq=args.seq,
            dynamic_seq=args.dynamic_seq,
        )
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"{path}: {os.path.getsize(path)} bytes, checked with onnxruntime")


if __name__ == "__main__":
    main()
