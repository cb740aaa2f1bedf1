"""Training: a trainer that keeps loss-owned modules, term schedules, mined-data loading, recipe runs."""

from __future__ import annotations

from xprt_st.objectives import OBJECTIVES, Objective, build_loss, register_objective
from xprt_st.training.data import MinedData, MinedDataError, load_mined
from xprt_st.training.recipe_setup import TrainerSetup, trainer_setup
from xprt_st.training.run import train_recipe
from xprt_st.training.schedules import RETENTION_SCHEDULE, Schedule, TermScheduleCallback
from xprt_st.training.trainer import (
    NonFiniteLossError,
    NonFiniteWeightsError,
    TrainingStateError,
    XPRTTrainer,
    last_complete_checkpoint,
    read_training_config,
)

__all__ = [
    "OBJECTIVES",
    "RETENTION_SCHEDULE",
    "MinedData",
    "MinedDataError",
    "NonFiniteLossError",
    "NonFiniteWeightsError",
    "Objective",
    "Schedule",
    "TermScheduleCallback",
    "TrainerSetup",
    "TrainingStateError",
    "XPRTTrainer",
    "build_loss",
    "last_complete_checkpoint",
    "load_mined",
    "read_training_config",
    "register_objective",
    "train_recipe",
    "trainer_setup",
]
