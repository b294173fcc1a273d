"""The knob-space DSL: how an operator template declares what the search may choose.

A space is declared, not discovered: the template names each choice with a
typed knob and a policy, and states its constraints with a reason::

    sp = ConfigSpace()
    sp.define_split("tile_i", extent=1024, num_outputs=3, policy="factors")
    sp.define_reorder("order", axes=["io", "jo", "ko"])
    sp.define_annotate("ann", axes=["ii", "ji"], policy="try_unroll_vec")
    sp.define_knob("parallel", [True, False])
    sp.add_constraint(lambda c: c["tile_i"][-1] <= 64, "inner tile at most 64")
    cfg = sp.sample(numpy.random.default_rng(0))
    assert sp.validate(json.loads(json.dumps(cfg.to_json()))) == cfg

This package imports only the standard library and NumPy.
"""

from ._axes import ANNOTATIONS, AnnotateKnob, ReorderKnob
from ._config import Config
from ._declare import Constraint
from ._errors import ConfigError, SpaceError
from ._knobs import ChoiceKnob, JsonValue, Knob, KnobValue, Scalar
from ._space import ConfigSpace
from ._split import SplitKnob

__all__ = [
    "ANNOTATIONS",
    "AnnotateKnob",
    "ChoiceKnob",
    "Config",
    "ConfigError",
    "ConfigSpace",
    "Constraint",
    "JsonValue",
    "Knob",
    "KnobValue",
    "ReorderKnob",
    "Scalar",
    "SpaceError",
    "SplitKnob",
]
