"""The analysis notebook runs on a small log shipped with the tests, so it never rots."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_analysis_notebook_executes_on_the_small_log(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(ROOT / "experiments" / "analysis.ipynb", as_version=4)
    log = Path(__file__).with_name("small_log.jsonl")
    nb.cells[1].source = f"LOG = {str(log)!r}"
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "80 candidates, 80 ok, 1 workload(s)" in outputs
    assert "Spearman rank correlation" in outputs
    assert "knobs by effect:" in outputs


def test_fusion_notebook_executes_on_the_kept_table(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(ROOT / "experiments" / "fusion.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "workloads from fusion.csv" in outputs
    assert "largest fusion gain here:" in outputs


def test_dynamic_shapes_notebook_executes_on_the_kept_results(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    nb = nbformat.read(ROOT / "experiments" / "dynamic_shapes.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "distinct lengths" in outputs
    assert "generic: transition" in outputs and "the bar" in outputs
    assert "plotted: specialize, generic, bucket" in outputs
