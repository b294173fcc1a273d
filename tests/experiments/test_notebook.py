"""The notebooks run on data shipped with the repository, so they never rot."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def executed(name: str, workdir: Path, first_cell: str | None = None) -> str:
    """The text ``experiments/<name>`` prints, run in ``workdir`` (``first_cell`` replacing cell 1)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(ROOT / "experiments" / name, as_version=4)
    if first_cell is not None:
        nb.cells[1].source = first_cell
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    return "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


def test_analysis_notebook_executes_on_the_small_log(tmp_path: Path) -> None:
    log = Path(__file__).with_name("small_log.jsonl")
    outputs = executed("analysis.ipynb", tmp_path, f"LOG = {str(log)!r}")
    assert "80 candidates, 80 ok, 1 workload(s)" in outputs
    assert "Spearman rank correlation" in outputs
    assert "knobs by effect:" in outputs


def test_fusion_notebook_executes_on_the_kept_table() -> None:
    outputs = executed("fusion.ipynb", ROOT)
    assert "workloads from fusion.csv" in outputs
    assert "largest fusion gain here:" in outputs


def test_dynamic_shapes_notebook_executes_on_the_kept_results() -> None:
    outputs = executed("dynamic_shapes.ipynb", ROOT)
    assert "distinct lengths" in outputs
    assert "generic: transition" in outputs and "the bar" in outputs
    assert "plotted: specialize, generic, bucket" in outputs
