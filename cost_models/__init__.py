"""Cost models: loop-nest features and the learnt models that rank candidates by them.

The search lowers each candidate schedule, turns the loop nest into a fixed
feature vector, and asks a model which candidates are worth measuring::

    from cost_models import get_cost_model, loop_features
    model = get_cost_model("xgb")
    model.fit(np.stack([loop_features(f) for f in measured]), seconds)
    scores = model.predict(np.stack([loop_features(f) for f in candidates]))

Models are found by name (``"xgb"``, ``"random"``); ``register_cost_model``
adds more.
"""

from .base import (
    CostModel,
    CostModelError,
    available_cost_models,
    get_cost_model,
    register_cost_model,
)
from .baseline import RandomModel
from .features import LOOP_FEATURE_NAMES, loop_features
from .xgb import XGBCostModel, XGBOptions, relevance

__all__ = [
    "LOOP_FEATURE_NAMES",
    "CostModel",
    "CostModelError",
    "RandomModel",
    "XGBCostModel",
    "XGBOptions",
    "available_cost_models",
    "get_cost_model",
    "loop_features",
    "register_cost_model",
    "relevance",
]
