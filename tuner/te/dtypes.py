"""Scalar types of tensor expressions and the promotion rule between them."""

from __future__ import annotations

__all__ = ["DTYPES", "check_dtype", "is_float", "is_int", "promote"]

# Ordered from narrow to wide: promotion picks the later of two.
#: uint8 holds the unsigned operand of an int8 dot product (``tuner.schedule.intrin``).
DTYPES: tuple[str, ...] = ("bool", "int8", "uint8", "int32", "int64", "float32", "float64")


def check_dtype(dtype: str, what: str) -> str:
    """Return ``dtype`` if it is supported, else raise one sentence naming ``what``."""
    if dtype not in DTYPES:
        raise TypeError(f"{what} has unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def promote(a: str, b: str) -> str:
    """The dtype of a binary operation on ``a`` and ``b``: the wider of the two."""
    return a if DTYPES.index(a) >= DTYPES.index(b) else b
