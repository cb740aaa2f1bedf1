"""The quickstart: mine, pre-train briefly and evaluate before and after, offline, on shipped data or a user's.

- :mod:`~xprt_st.quickstart.config`: :class:`QuickstartConfig`, the run's settings, and its plan;
- :mod:`~xprt_st.quickstart.defaults`: the defaults and closing notes (read by the CLI without loading torch);
- :mod:`~xprt_st.quickstart.notes`: what its figures mean (pure);
- :mod:`~xprt_st.quickstart.stages`: its stages (mine, hard negatives, train, scores), which
  :func:`xprt_st.pipeline.run_pipeline` checks, reuses by fingerprint or runs;
- :mod:`~xprt_st.quickstart.summary`: the scores, the label-free check and the titles of ``summary.json``;
- :mod:`~xprt_st.quickstart.run`: the plan, its checks and the run (:func:`run_quickstart`).

Each name below is imported from its module on first use, so ``from xprt_st.quickstart.defaults import DEFAULTS``
(the CLI's ``--help``) loads no model code.
"""

from __future__ import annotations

from importlib import import_module

_HOMES = {
    **dict.fromkeys(
        ("PACKAGED_DATA", "QUICKSTART_CORPUS", "QuickstartConfig", "QuickstartInputError", "QuickstartPlan"), "config"
    ),
    **dict.fromkeys(
        (
            "DEFAULTS",
            "HOLDOUT",
            "LABEL_FREE_NOTE",
            "LOSS_NOTE",
            "NO_GAIN_NOTE",
            "QuickstartDefaults",
            "closing_note",
            "corpus_steps",
            "hybrid_note",
        ),
        "defaults",
    ),
    **dict.fromkeys(("after_merge", "mined_stage"), "stages"),
    **dict.fromkeys(("label_free_summary", "titles_summary"), "summary"),
    **dict.fromkeys(("check_folder", "check_inputs", "plan_quickstart", "quickstart_stages", "run_quickstart"), "run"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    """The public name ``name`` from the module that defines it (imported then, not with the package)."""
    if name in _HOMES:
        return getattr(import_module(f"xprt_st.quickstart.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'xprt_st.quickstart' has no attribute {name!r}")
