"""The schedule language: how an operator's loops run, recorded as a replayable trace."""

from .apply import apply_step
from .schedule import AxisRef, Schedule, StageRef, create_schedule
from .state import MAX_UNROLL, ScheduleError, Stage, State
from .steps import STEP_TYPES, Step, step_from_json

__all__ = [
    "MAX_UNROLL",
    "STEP_TYPES",
    "AxisRef",
    "Schedule",
    "ScheduleError",
    "Stage",
    "StageRef",
    "State",
    "Step",
    "apply_step",
    "create_schedule",
    "step_from_json",
]
