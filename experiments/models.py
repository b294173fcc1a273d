"""Whole models for the compiler's tests and benchmarks, written in plain PyTorch and exported to ONNX.

    python experiments/models.py resnet18 out/resnet18.onnx
    python experiments/models.py resnet50 out/resnet50.onnx --batch 8
    python experiments/models.py mobilenet_v2 out/mobilenet_v2.onnx
    python experiments/models.py encoder out/encoder.onnx --layers 4 --seq 128
    python experiments/models.py encoder tests/models/data/encoder_small.onnx --small --dynamic-batch
    python experiments/models.py encoder out/encoder_dynamic.onnx --dynamic-batch --dynamic-seq

Three families, each the published architecture with random weights (no
torchvision, no downloads), written in ``architectures.py`` (beside this
file): ResNet-18 and ResNet-50, MobileNetV2 and a BERT-style encoder stack.

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
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from architectures import (  # beside this file: on the path of its scripts
    BasicBlock,
    Bottleneck,
    Encoder,
    MobileNetV2,
    ResNet,
    SelfAttention,
)
from torch import nn

__all__ = ["MODELS", "build", "check", "export"]

SEED = 0


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
