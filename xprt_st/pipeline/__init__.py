"""The layer above the stages: a command is a list of stages that :func:`run_pipeline` checks, reuses or runs.

``stage.py`` says what a stage is (a typed config, a fingerprint, a check, a run); ``run.py`` runs a list of them
with one reuse policy and records the stage table.
"""

from __future__ import annotations

from xprt_st.pipeline.run import Action, StageRow, plan, run_pipeline
from xprt_st.pipeline.stage import Stage

__all__ = ["Action", "Stage", "StageRow", "plan", "run_pipeline"]
