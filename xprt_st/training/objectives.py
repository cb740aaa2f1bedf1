"""Kept for older imports: the objective registry lives in :mod:`xprt_st.objectives`, below the recipe loader."""

from __future__ import annotations

from xprt_st.objectives import (
    DAMAGED,
    OBJECTIVES,
    ColumnSelect,
    Objective,
    ObjectiveUnavailableError,
    add_damaged_anchor,
    build_loss,
    check_objective,
    delete_words,
    get_objective,
    register_objective,
    trained_vector_problems,
)

__all__ = [
    "DAMAGED",
    "OBJECTIVES",
    "ColumnSelect",
    "Objective",
    "ObjectiveUnavailableError",
    "add_damaged_anchor",
    "build_loss",
    "check_objective",
    "delete_words",
    "get_objective",
    "register_objective",
    "trained_vector_problems",
]
