"""The zoo's models (``experiments/zoo.py``): how each is built, its inputs and how it is exported.

torchvision's classification networks, ``transformers`` families from config
objects, and legacy exports of some; random weights from fixed seeds, nothing
downloaded. Each :class:`Entry` builds its torch module (``small``: the tests'
sizes) and seeded example inputs; ``zoo.export`` writes and checks the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEED", "SEQ", "ZOO", "Entry"]

SEED = 0


@dataclass(frozen=True)
class Entry:
    """One model of the zoo: how to build it, its inputs, and how it is exported."""

    name: str
    family: str  # "vision" or "text"
    make: Callable[[bool], Any]  # small -> torch module in eval mode
    inputs: Callable[[bool, int, int], dict[str, Any]]  # (small, batch, seq) -> torch tensors
    opset: int = 17
    legacy: bool = False  # old-exporter form: no folding, initializers as inputs
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)
    note: str = ""

    def stem(self, small: bool) -> str:
        return f"{self.name}{'_small' if small else ''}"


# -- vision ------------------------------------------------------------------------------------


def _image_size(name: str, small: bool) -> int:
    if name == "inception_v3":
        return 96 if small else 299
    if name in ("alexnet", "vgg16"):  # their adaptive pool needs a 224 input's feature map
        return 224
    return 64 if small else 224


def _torchvision(name: str, **kwargs: Any) -> Callable[[bool], Any]:
    def make(small: bool) -> Any:
        import torchvision

        if small and name == "vgg16":  # VGG-16's 13 convolutions and pools, 1/4 of the channels
            from torch import nn
            from torchvision.models.vgg import VGG, cfgs, make_layers

            narrow = [c if c == "M" else int(c) // 4 for c in cfgs["D"]]
            model = VGG(make_layers(narrow), num_classes=10, init_weights=True)
            model.classifier = nn.Sequential(
                *(nn.Linear(128 * 7 * 7, 256), nn.ReLU(True), nn.Dropout()),
                *(nn.Linear(256, 256), nn.ReLU(True), nn.Dropout(), nn.Linear(256, 10)),
            )
            return model

        return torchvision.models.get_model(
            name, weights=None, num_classes=10 if small else 1000, **kwargs
        )

    return make


def _vit_small(small: bool) -> Any:
    from torchvision.models.vision_transformer import VisionTransformer

    if small:
        return VisionTransformer(64, 16, 2, 2, 64, 128, num_classes=10)
    return VisionTransformer(224, 16, 12, 6, 384, 1536, num_classes=1000)  # ViT-S/16


def _images(name: str) -> Callable[[bool, int, int], dict[str, Any]]:
    def inputs(small: bool, batch: int, seq: int) -> dict[str, Any]:
        import torch

        size = _image_size(name, small)
        gen = torch.Generator().manual_seed(SEED + 2)
        return {"input": torch.randn((batch, 3, size, size), generator=gen)}

    return inputs


def _vision(name: str, opset: int = 17, legacy: bool = False, **kwargs: Any) -> Entry:
    label = name if not legacy else f"{name}_opset{opset}"
    make = _vit_small if name == "vit" else _torchvision(name, **kwargs)
    dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if legacy else {}
    return Entry(label, "vision", make, _images(name), opset, legacy, dynamic)


_NO_AUX = {"aux_logits": False, "init_weights": False}
VISION = [
    _vision("resnet18"),
    _vision("resnet50"),
    _vision("resnext50_32x4d"),
    _vision("wide_resnet50_2"),
    _vision("mobilenet_v2"),
    _vision("mobilenet_v3_large"),
    _vision("efficientnet_b0"),
    _vision("regnet_y_400mf"),
    _vision("convnext_tiny"),
    _vision("densenet121"),
    _vision("squeezenet1_1"),
    _vision("shufflenet_v2_x1_0"),
    _vision("googlenet", **_NO_AUX),
    _vision("inception_v3", **_NO_AUX),
    _vision("vgg16"),
    _vision("alexnet"),
    _vision("mnasnet1_0"),
    _vision("vit"),
    _vision("alexnet", 9, legacy=True),
    _vision("vgg16", 9, legacy=True),
    _vision("resnet50", 9, legacy=True),
    _vision("googlenet", 9, legacy=True, **_NO_AUX),
    _vision("squeezenet1_1", 11, legacy=True),
    _vision("densenet121", 11, legacy=True),
]


# -- text --------------------------------------------------------------------------------------


def _last_hidden(model: Any, keys: tuple[str, ...]) -> Any:
    """A ``transformers`` model wrapped so that the export has one output, the last hidden state."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(keys, args, strict=True))).last_hidden_state

    return LastHidden().eval()


def _hf(config_name: str, model_name: str, keys: tuple[str, ...], **sizes: Any) -> Any:
    def make(small: bool) -> Any:
        import transformers

        cfg = dict(sizes["small" if small else "full"])
        config = getattr(transformers, config_name)(**cfg)
        config._attn_implementation = "eager"
        model = getattr(transformers, model_name)(config).eval()
        return _last_hidden(model, keys)

    return make


def _tokens(vocab: int, mask: bool) -> Callable[[bool, int, int], dict[str, Any]]:
    def inputs(small: bool, batch: int, seq: int) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(SEED + 2)
        feeds = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=gen)}
        if mask:
            m = torch.ones((batch, seq), dtype=torch.int64)
            m[0, seq - max(1, seq // 4) :] = 0  # padding at the end of the first row
            feeds["attention_mask"] = m
        return feeds

    return inputs


def _text(name: str, config: str, model: str, mask: bool, full: dict, small: dict) -> Entry:
    keys = ("input_ids", "attention_mask") if mask else ("input_ids",)
    axes = {k: {0: "batch", 1: "seq"} for k in (*keys, "output")}
    vocab = full.get("vocab_size", 1000)
    return Entry(
        name,
        "text",
        _hf(config, model, keys, full=full, small=small),
        _tokens(vocab, mask),
        17,
        False,
        axes,
    )


def _vit_hf(small: bool) -> Any:
    import transformers

    sizes = (
        {"image_size": 32, "patch_size": 8, "hidden_size": 64, "num_hidden_layers": 2}
        | {"num_attention_heads": 2, "intermediate_size": 128}
        if small
        else {"image_size": 224, "patch_size": 16, "hidden_size": 384}
        | {"num_hidden_layers": 6, "num_attention_heads": 6, "intermediate_size": 1536}
    )
    config = transformers.ViTConfig(**sizes)
    config._attn_implementation = "eager"
    return _last_hidden(transformers.ViTModel(config).eval(), ("pixel_values",))


def _pixels(small: bool, batch: int, seq: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(SEED + 2)
    size = 32 if small else 224
    return {"pixel_values": torch.randn((batch, 3, size, size), generator=gen)}


_BERT = {"vocab_size": 1000, "hidden_size": 768, "num_hidden_layers": 4}
_BERT |= {"num_attention_heads": 12, "intermediate_size": 3072}
_BERT_SMALL = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2}
_BERT_SMALL |= {"num_attention_heads": 2, "intermediate_size": 128}
TEXT = [
    _text("bert", "BertConfig", "BertModel", True, _BERT, _BERT_SMALL),
    _text(
        "distilbert",
        "DistilBertConfig",
        "DistilBertModel",
        True,
        {"vocab_size": 1000, "dim": 768, "n_layers": 4, "n_heads": 12, "hidden_dim": 3072},
        {"vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},
    ),
    _text(
        "gpt2",
        "GPT2Config",
        "GPT2Model",
        False,
        {"vocab_size": 1000, "n_embd": 768, "n_layer": 4, "n_head": 12, "n_positions": 1024},
        {"vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 128},
    ),
    _text(
        "t5_encoder",
        "T5Config",
        "T5EncoderModel",
        True,
        {"vocab_size": 1000, "d_model": 512, "num_layers": 4, "num_heads": 8, "d_ff": 2048}
        | {"d_kv": 64},
        {"vocab_size": 1000, "d_model": 64, "num_layers": 2, "num_heads": 2, "d_ff": 128}
        | {"d_kv": 32},
    ),
    Entry(
        "vit_hf",
        "vision",
        _vit_hf,
        _pixels,
        17,
        False,
        {"pixel_values": {0: "batch"}, "output": {0: "batch"}},
    ),
]

ZOO: dict[str, Entry] = {e.name: e for e in (*VISION, *TEXT)}
SEQ = {False: 128, True: 16}  # the example sequence length, full and small
