"""A compiled model saved as one file: loaded in a fresh process without compiling, refused
when damaged or forged, compiled from its records elsewhere."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tuner
from tuner.model.artifact import ArtifactError, ArtifactWarning

from .conftest import onnx, ort_outputs, residual_block


@pytest.fixture
def saved(tmp_path, rng):
    """A residual block compiled into a private cache and saved: (model file, saved file, x)."""
    model = residual_block(rng)
    path = tmp_path / "block.onnx"
    onnx.save(model, str(path))
    mod = tuner.compile_model(path)
    out = mod.save(tmp_path / "block.tpk")
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    return path, out, x


def _fresh(script: str, cache: Path, *args: str) -> dict:
    """Run ``script`` in a new Python process with kernel cache ``cache``; its JSON line."""
    env = {**os.environ, "TUNER_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_LOAD_AND_RUN = """
    import json, sys, warnings
    import numpy as np
    import tuner
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = tuner.load(sys.argv[1])
    x = np.load(sys.argv[2])
    (y,) = mod.run({"x": x})
    np.save(sys.argv[3], y)
    plan = mod.plans[0]
    print(json.dumps({
        "compiled": plan.compiled,
        "from_cache": [bool(k.kernel.from_cache) for k in plan.kernels],
        "warnings": [str(w.message) for w in caught],
    }))
"""


def test_a_saved_model_runs_in_a_fresh_process_without_compiling(saved, tmp_path):
    path, out, x = saved
    np.save(tmp_path / "x.npy", x)
    empty = tmp_path / "empty-cache"  # nothing of this model's kernels is cached there
    got = _fresh(_LOAD_AND_RUN, empty, str(out), str(tmp_path / "x.npy"), str(tmp_path / "y"))
    assert got["compiled"] == 0 and all(got["from_cache"]) and not got["warnings"]
    assert list((empty / "__pycache__").glob("k_*.nbi"))  # the file's code, installed
    (want,) = ort_outputs(onnx.load(str(path)), {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)


def test_the_cli_compiles_to_a_file_and_runs_it_beside_onnxruntime(tmp_path, rng):
    path = tmp_path / "block.onnx"
    onnx.save(residual_block(rng), str(path))
    env = {**os.environ, "TUNER_CACHE_DIR": str(tmp_path / "cache-a")}
    cmd = [sys.executable, "-m", "tuner"]
    done = subprocess.run(
        [*cmd, "compile", str(path), "-o", str(tmp_path / "b.tpk"), "--json", "-"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["saved"] == str(tmp_path / "b.tpk")
    env["TUNER_CACHE_DIR"] = str(tmp_path / "cache-b")
    done = subprocess.run(
        [*cmd, "run", str(tmp_path / "b.tpk"), "--compare", "onnxruntime", "--repeat", "3",
         "--json", "-"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["kernels_compiled"] == 0 and row["first_result_s"] > 0
    assert [o["output"] for o in row["outputs"]] == ["y"]  # checked against onnxruntime
    assert "no kernel compiled" in done.stderr


def _rewrite(src: Path, dst: Path, change) -> None:
    """``src`` with ``change(members)`` applied and every hash made consistent again: a
    forgery by someone who knows the format, which only the content checks can catch."""
    with zipfile.ZipFile(src) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members.pop("manifest.json"))
    change(members, manifest)
    manifest["members"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items()}
    text = json.dumps(manifest).encode()
    with zipfile.ZipFile(dst, "w") as zf:
        zf.comment = (
            b"tuner compiled model; manifest sha256 " + hashlib.sha256(text).hexdigest().encode()
        )
        zf.writestr("manifest.json", text)
        for n, d in members.items():
            zf.writestr(n, d)


class _Planted:
    def __reduce__(self):
        return (os.system, ("touch planted",))


def test_a_damaged_or_forged_file_is_refused_in_one_line(saved, tmp_path):
    _, out, _ = saved
    data = bytearray(out.read_bytes())
    # A byte of the largest member's stored data: a flip in a header field no reader uses
    # (a member's time) damages nothing, and an earlier middle byte of the file landed there
    # now and then.
    with zipfile.ZipFile(out) as zf:
        info = max(zf.infolist(), key=lambda i: i.compress_size)
    at = info.header_offset  # its local header: 30 bytes, then its name and extra field
    name_len = int.from_bytes(data[at + 26 : at + 28], "little")
    extra_len = int.from_bytes(data[at + 28 : at + 30], "little")
    data[at + 30 + name_len + extra_len + info.compress_size // 2] ^= 0xFF
    (tmp_path / "flipped.tpk").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="modified or damaged"):
        tuner.load(tmp_path / "flipped.tpk")

    def plant(members, manifest):
        name = next(n for n in members if n.endswith(".nbc"))
        members[name] = pickle.dumps(_Planted())

    _rewrite(out, tmp_path / "forged.tpk", plant)
    os.chdir(tmp_path)
    with pytest.raises(ArtifactError, match=r"names posix\.system.*refused"):
        tuner.load(tmp_path / "forged.tpk")
    assert not (tmp_path / "planted").exists()

    def extra(members, manifest):
        members["code/../../evil.py"] = b"import os"

    _rewrite(out, tmp_path / "extra.tpk", extra)
    with pytest.raises(ArtifactError, match="belongs to no part of the model"):
        tuner.load(tmp_path / "extra.tpk")


def test_not_a_compiled_model_is_one_line(tmp_path):
    (tmp_path / "a.tpk").write_bytes(b"not a zip")
    with pytest.raises(ArtifactError, match="not a compiled model"):
        tuner.load(tmp_path / "a.tpk")
    with zipfile.ZipFile(tmp_path / "b.tpk", "w") as zf:
        zf.writestr("x.txt", "hello")
    with pytest.raises(ArtifactError, match="no tuner manifest"):
        tuner.load(tmp_path / "b.tpk")
    with pytest.raises(ArtifactError, match="does not exist"):
        tuner.load(tmp_path / "missing.tpk")


def test_on_other_hardware_it_says_so_and_compiles_from_its_records(saved, tmp_path):
    path, out, x = saved

    def elsewhere(members, manifest):
        manifest["target"]["fingerprint"] = "0" * 16

    _rewrite(out, tmp_path / "other.tpk", elsewhere)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = tuner.load(tmp_path / "other.tpk")
    assert any(
        issubclass(w.category, ArtifactWarning) and "other hardware" in str(w.message)
        for w in caught
    )
    (want,) = ort_outputs(onnx.load(str(path)), {"x": x})
    np.testing.assert_allclose(mod.run({"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_a_module_of_symbolic_shapes_is_not_saved(tmp_path, rng):
    path = tmp_path / "dyn.onnx"
    onnx.save(residual_block(rng, batch="batch"), str(path))
    mod = tuner.compile_model(path)
    with pytest.raises(ArtifactError, match="one set of input shapes"):
        mod.save(tmp_path / "dyn.tpk")


def test_the_saved_constants_and_records_load_as_data(saved):
    _, out, _ = saved
    with zipfile.ZipFile(out) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        consts = np.load(io.BytesIO(zf.read("consts.npz")), allow_pickle=False)
        assert len(consts.files) == len(manifest["lowered"]["consts"])
        assert all(n.startswith("code/k_") for n in zf.namelist() if n.startswith("code/"))
    assert manifest["source"]["sha256"] and manifest["kernels"]


def test_a_damaged_compressed_member_is_refused_in_one_line(tmp_path):
    """A member whose deflate stream is damaged (zlib's own error, not a bad CRC) is refused as
    damaged, not with a traceback."""
    path = tmp_path / "damaged.tpk"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", b"{}" * 4096)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("manifest.json")
    at = info.header_offset
    name_len = int.from_bytes(data[at + 26 : at + 28], "little")
    extra_len = int.from_bytes(data[at + 28 : at + 30], "little")
    data[at + 30 + name_len + extra_len] = 0xFF  # the first block's type: 3, which is reserved
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="modified or damaged"):
        tuner.load(path)
