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
