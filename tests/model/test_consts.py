"""The constants of a cached lowering or an artifact: read back as arrays of their own."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tuner.graph.ir import Value
from tuner.model.lowered import Lowered, read_consts, write_consts


def _written(consts: dict[str, np.ndarray]) -> io.BytesIO:
    buf = io.BytesIO()
    write_consts(buf, list(consts), consts)
    buf.seek(0)
    return buf


def test_constants_read_back_equal_writable_and_their_own() -> None:
    from tuner.model.lowered import _kept

    rng = np.random.default_rng(0)
    consts = {
        "w": rng.standard_normal((64, 3, 7, 7)).astype(np.float32),
        "big": rng.standard_normal(700_001).astype(np.float32),  # more than one slice
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int8).reshape(2, 3)),
        "scalar": np.array(3.5, np.float64),
        "empty": np.zeros((0, 5), np.int32),
    }
    got = read_consts(_written(consts), list(consts))
    for name, want in consts.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)
        assert got[name].flags.writeable, name
        if name != "fortran":  # what interning keeps without a copy
            assert _kept(got[name]), name


def test_a_constant_of_object_dtype_is_refused() -> None:
    buf = io.BytesIO()
    np.savez(buf, c0=np.array([{"x": 1}], dtype=object))  # pickled: never loaded
    buf.seek(0)
    with pytest.raises(ValueError):
        read_consts(buf, ["w"])


def test_a_truncated_constant_is_refused() -> None:
    import zipfile

    whole = _written({"w": np.arange(1000, dtype=np.float32)}).getvalue()
    with zipfile.ZipFile(io.BytesIO(whole)) as z:
        member = z.read("c0.npy")
    cut = io.BytesIO()
    with zipfile.ZipFile(cut, "w") as z:
        z.writestr("c0.npy", member[:-100])
    cut.seek(0)
    with pytest.raises(ValueError):
        read_consts(cut, ["w"])


@pytest.mark.parametrize("cut", [0, 5, 0.5])
def test_a_damaged_file_of_constants_is_a_value_error(cut: float) -> None:
    """What ``Lowered.load`` and ``artifact.load`` catch: a damaged cache is compiled again, a
    damaged artifact is one clear line."""
    whole = _written({"w": np.arange(10_000, dtype=np.float32)}).getvalue()
    data = b"not a zip file" if cut == 5 else whole[: int(len(whole) * cut)]
    with pytest.raises(ValueError):
        read_consts(io.BytesIO(data), ["w"])


def test_interning_keeps_an_aligned_array_of_its_own_and_copies_a_view() -> None:
    from tuner.model.plan import BASE_ALIGN, aligned_copy, aligned_empty

    own = aligned_copy(np.arange(12, dtype=np.float32))
    view = np.arange(24, dtype=np.float32)[::2]
    odd = aligned_empty(52)[4:].view(np.float32)  # its own bytes, 4 past a cache line
    odd[...] = 7
    values = {
        "own": Value("own", "float32", (12,), own),
        "view": Value("view", "float32", (12,), view),
        "odd": Value("odd", "float32", (12,), odd),
    }
    lowered = Lowered("m", (), (), (), (), values)
    interned = lowered.interned({})
    assert interned.values["own"].data is own
    for name, data in (("view", view), ("odd", odd)):
        got = interned.values[name].data
        assert got is not data and got.flags.c_contiguous and got.ctypes.data % BASE_ALIGN == 0
        np.testing.assert_array_equal(got, data)
