"""Search strategies, found by name; all are ask/tell shaped."""

from .base import Observation, Strategy, StrategyError, get_strategy, register_strategy, strategies

__all__ = [
    "Observation",
    "Strategy",
    "StrategyError",
    "get_strategy",
    "register_strategy",
    "strategies",
]
