"""What Numba source for any device shares: scalars typed as NumPy's, so Numba infers them.

Both backends (``cpu``: ``numba.njit``; ``cuda``: ``numba.cuda.jit``)
generate Python source that Numba compiles. A float constant or an integer
division left to Python would be typed float64; written ``np.float32(...)``
it stays in the kernel's dtype.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..lower.render import SourceRenderer
from ..te.dtypes import is_float
from ..te.expr import Binary, Const, Expr
from .backend import cache_dir

__all__ = ["NumbaSourceRenderer", "write_module"]


class NumbaSourceRenderer(SourceRenderer):
    """A ``SourceRenderer`` whose constants and integer divisions carry NumPy dtypes."""

    def const(self, e: Const) -> str:
        text = super().const(e)
        if e.dtype in ("bool", "int64"):
            return text
        if not is_float(e.dtype):
            # A bare literal is an int64 to Numba and widens what it meets: an int32 sum
            # plus ``128`` was int64 arithmetic, half as many lanes a vector (the int8
            # kernels' zero-point correction ran in int64 vectors, converted by vcvtqq2ps).
            return f"np.{e.dtype}({text})"
        return f"np.{e.dtype}({text.replace('inf', 'np.inf')})"

    def binary(self, e: Binary, a: str, b: str) -> str:
        if e.op == "div" and not is_float(e.a.dtype):
            a, b = f"np.{e.dtype}({a})", f"np.{e.dtype}({b})"
        return super().binary(e, a, b)

    def flat_index(self, name: str, idx: tuple[Expr, ...]) -> Expr:
        """Buffer ``name``'s element ``idx`` as one row-major offset (kernels take flat arrays)."""
        flat: Expr = Const(0)
        stride: int | Expr = 1
        for i, extent in zip(reversed(idx), reversed(self.buffers[name].shape), strict=True):
            flat = flat + i * stride
            stride *= extent
        return flat


def write_module(name: str, source: str) -> Path:
    """``source`` as ``<cache folder>/<name>.py``, written atomically unless it is there already.

    Several processes may build the same kernel at once: each writes its own
    temporary file and renames it into place, so none imports a partial one.
    """
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return path
