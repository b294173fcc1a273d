"""Example spaces shared by the knob-space tests (imported by conftest and tests)."""

from __future__ import annotations

from tuner.space import ConfigSpace


def matmul_space() -> ConfigSpace:
    """The space from the package documentation: every knob kind and one constraint."""
    sp = ConfigSpace()
    sp.define_split("tile_i", extent=1024, num_outputs=3, policy="factors")
    sp.define_split("tile_k", extent=1000, num_outputs=2, policy="power2", max_factor=256)
    sp.define_split(
        "tile_j", extent=64, num_outputs=2, policy="candidate", candidates=[(4, 16), (8, 8)]
    )
    sp.define_reorder("order", axes=["io", "jo", "ko"], policy="all")
    sp.define_annotate("ann", axes=["ii", "ji"], policy="try_unroll_vec")
    sp.define_knob("parallel", [True, False])
    sp.define_knob("kc", [64, 128, 256])
    sp.add_constraint(
        lambda c: c["tile_i"][-1] * c["tile_j"][-1] <= 128,
        "register block at most 128 accumulators",
    )
    return sp


def small_space() -> ConfigSpace:
    """A constrained space small enough to enumerate by brute force (72 points)."""
    sp = ConfigSpace()
    sp.define_split("tile", extent=12, num_outputs=2)  # 6 values
    sp.define_annotate("ann", axes=["ji"], policy="try_unroll_vec")  # 3 values
    sp.define_knob("mode", ["a", "b", "c", "d"])
    sp.add_constraint(lambda c: c["tile"][1] <= 4 or c["ann"] == ("none",), "wide tiles are plain")
    sp.add_constraint(lambda c: c["mode"] != "d" or c["tile"][0] > 1, "mode d needs an outer loop")
    return sp
