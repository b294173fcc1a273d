"""The model zoo (experiments/zoo.py) at its small sizes: a CI subset compiles and matches onnxruntime.

Every family the zoo has is represented once: a residual CNN, a legacy
opset-9 export with ceil-mode pools and shape arithmetic, a legacy opset-11
one, torchvision's ViT (a Reshape target computed with Mod), and BERT
(GatherElements, a padding mask built by index arithmetic) and GPT-2 (a
causal mask) from ``transformers`` configs. The whole zoo, full size, is
``python experiments/zoo.py --check``. The module needs the ``zoo`` extra and
skips without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import zoo  # noqa: E402

CI_SUBSET = [
    "resnet18",
    "googlenet_opset9",
    "squeezenet1_1_opset11",
    "vit",
    "bert",
    "gpt2",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.slow
@pytest.mark.parametrize("name", CI_SUBSET)
def test_small_zoo_model_matches_onnxruntime(name: str, cache: Path) -> None:
    row = zoo.check(zoo.ZOO[name], small=True, cache=cache, threads=2, rounds=0)
    assert row.get("error") is None, row.get("error")
    assert row["match"] == "yes", row
    assert row["kernels"] and row["kernels"] > 1


def test_the_zoo_lists_each_family_and_refuses_unknown_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert zoo.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("resnet50", "alexnet_opset9", "bert", "gpt2", "vit_hf"):
        assert name in out
    assert zoo.main(["--check", "--only", "nonet"]) == 2
    assert "unknown model nonet" in capsys.readouterr().err


def _lengths_match(module: object, path: Path, entry: zoo.Entry, pairs: list) -> None:
    import numpy as np

    for batch, seq in pairs:
        feeds = zoo.feeds_for(path, entry, True, batch, seq)
        (got,) = module.run(feeds)  # type: ignore[attr-defined]
        (want,) = zoo._onnxruntime(path, feeds, threads=2)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


#: (batch, sequence) pairs: 1, primes, a power of two, the bound.
PAIRS = [(1, 1), (2, 7), (1, 16), (3, 13), (4, 32)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "mode"),
    [("gpt2", "generic"), ("gpt2", "bucket"), ("bert", "generic"), ("bert", "bucket")],
)
def test_symbolic_sequence_exports_serve_every_length(name: str, mode: str, cache: Path) -> None:
    """transformers' exports with a symbolic batch and sequence (fused QKV split, causal and
    padding masks computed from Shape, Range position ids) in the shape-generic modes; BERT's
    bucket reads its attention mask flattened at ``b * seq + j`` (``tuner.model.bucket_probe``)."""
    import warnings

    import tuner

    entry = zoo.ZOO[name]
    path = zoo.export(entry, True, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned kernels; generic's own shape at (1, 1)
        module = tuner.compile_model(path, dynamic=mode, bounds={"batch": 4, "seq": 32})
        _lengths_match(module, path, entry, PAIRS)
    if mode == "generic":
        assert module.generic is not None
        built = {id(f.kernel) for f in module.generic.families.values()}
        for plan in module.plans[1:]:  # every shape past (1, 1) ran the kernels built once
            assert {id(k) for k in plan.kernels} <= built


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bucket", "generic"])
def test_a_vision_transformer_with_a_symbolic_batch_serves_every_batch(
    mode: str, cache: Path
) -> None:
    """transformers' ViT concatenates its class token, expanded to the batch, before the
    patches: a Concat whose every input is padded along the batch, which the probe passes
    (bounded by 4, the batch is probed at 1 padded to 4); in ``generic`` the concatenation
    and the patches' convolution (its bias an epilogue) take a symbolic batch, every batch
    served by the kernels built once."""
    import warnings

    import numpy as np

    import tuner

    entry = zoo.ZOO["vit_hf"]
    path = zoo.export(entry, True, cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned kernels
        module = tuner.compile_model(path, dynamic=mode, bounds={"batch": 4})
        for batch in (1, 3, 4):
            feeds = zoo.feeds_for(path, entry, True, batch, 1)
            (got,) = module.run(feeds)
            (want,) = zoo._onnxruntime(path, feeds, threads=2)
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    if mode == "generic":
        assert module.generic is not None
        built = {id(f.kernel) for f in module.generic.families.values()}
        for plan in module.plans[1:]:
            assert {id(k) for k in plan.kernels} <= built
