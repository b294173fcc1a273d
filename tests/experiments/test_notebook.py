"""The notebooks run on data shipped with the repository, so they never rot."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def executed(name: str, workdir: Path) -> tuple[str, int]:
    """The text ``experiments/<name>`` prints, run in ``workdir``, and how many images it draws."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(ROOT / "experiments" / name, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    images = sum("image/png" in o.get("data", {}) for o in outputs)
    return "".join(o.get("text", "") for o in outputs), images


def test_analysis_notebook_takes_its_log_from_the_environment_and_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNER_LOG", str(Path(__file__).with_name("small_log.jsonl")))
    outputs, images = executed("analysis.ipynb", tmp_path)
    assert "80 candidates, 80 ok, 1 workload(s)" in outputs
    assert "Spearman rank correlation" in outputs
    assert "knobs by effect:" in outputs
    assert images >= 3  # convergence, the spread, the model's ranking (inline, not a file)


def test_fusion_notebook_executes_on_the_kept_table() -> None:
    outputs, images = executed("fusion.ipynb", ROOT)
    assert "workloads from fusion.csv" in outputs
    assert "largest fusion gain here:" in outputs
    assert images >= 1


def test_dynamic_shapes_notebook_executes_on_the_kept_results() -> None:
    outputs, images = executed("dynamic_shapes.ipynb", ROOT)
    assert images >= 1
    assert "distinct lengths" in outputs
    assert "generic: transition" in outputs and "the bar" in outputs
    assert "plotted: specialize, generic, bucket" in outputs
