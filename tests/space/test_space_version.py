"""A space's version hash: equal for equal declarations, different when the space changes."""

from __future__ import annotations

from tuner.space import ConfigSpace


def _space(values: list[int], constraint: str = "kc fits", absent: object = 64) -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_knob("kc", values, absent=absent)
    sp.define_knob("unroll", [1, 2, 4])
    sp.add_constraint(lambda c: c["kc"] >= c["unroll"], constraint)
    return sp.freeze()


def test_equal_declarations_share_a_version() -> None:
    assert _space([64, 128]).version == _space([64, 128]).version
    assert len(_space([64, 128]).version) == 16


def test_any_change_to_the_space_changes_its_version() -> None:
    base = _space([64, 128]).version
    assert _space([64, 128, 256]).version != base  # a knob gained a value
    assert _space([128, 64]).version != base  # values in another order index differently
    assert _space([64, 128], constraint="another rule").version != base
    assert _space([64, 128], absent=128).version != base
