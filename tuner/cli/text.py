"""How the commands write a comparison: ``3.2x faster`` or ``20x slower``, never ``0.05x``.

>>> speed(ours=0.002, peer=0.040, peer_name="onnxruntime")
'20x faster than onnxruntime'
>>> speed(ours=0.36, peer=0.001)
'360x slower'
"""

from __future__ import annotations

import math

__all__ = ["WIDE", "milliseconds", "speed"]

#: A spread (interquartile range over the median) above which a time is shown with ``±``.
WIDE = 0.1


def speed(ours: float, peer: float, peer_name: str = "") -> str:
    """Our time beside a peer's as a ratio people read (``even`` within half a percent)."""
    than = f" than {peer_name}" if peer_name else ""
    if ours <= 0 or peer <= 0:
        return f"not comparable{than} (a time of zero)"
    ratio = peer / ours
    if 1 / 1.005 < ratio < 1.005:
        return f"even{' with ' + peer_name if peer_name else ''}"
    word, times = ("faster", ratio) if ratio > 1 else ("slower", 1 / ratio)
    return f"{_times(times)}x {word}{than}"


def _times(x: float) -> str:
    """Two digits where they mean something: 1.04, 3.2, 20, 360."""
    if x < 2:
        return f"{x:.2f}"
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def milliseconds(median: float, iqr: float = 0.0) -> str:
    """``1.234`` ms, or ``1.234 ±0.210`` when the samples spread widely (half the IQR).

    Three decimals, or three significant digits below a tenth of a millisecond
    (``0.00215 ±0.00031``), the spread to as many decimals as the median.
    """
    ms = median * 1e3
    decimals = 3 if ms >= 0.1 or ms <= 0 else 2 - math.floor(math.log10(ms))
    text = f"{ms:.{decimals}f}"
    if median > 0 and iqr / median > WIDE:
        text += f" ±{iqr / 2 * 1e3:.{decimals}f}"
    return text
