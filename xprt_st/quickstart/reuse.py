"""Which of the quickstart's stages a rerun into the same ``-o`` may reuse: those made with the same settings.

The quickstart chains two stages into its folder, ``mined/`` and ``model/``; each gets a fingerprint
(:meth:`~xprt_st.quickstart.config.QuickstartConfig.plan`, :mod:`xprt_st.fingerprint`) before it starts. A rerun reuses
a stage only when it is the quickstart's own (in its manifest) and its fingerprint is equal to the one the rerun would
record; otherwise it stops before any work. So a new ``--recipe``, ``--max-steps``, ``--seed`` or ``--model`` no longer
labels the old model with the new settings, and a new ``--holdout`` no longer re-merges the held-out set of a model that
trained on the old draw (the label-free lines would score it on documents it trained on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xprt_st.fingerprint import NOT_SHAPING, FingerprintError, check_stage, write_fingerprint
from xprt_st.output_folder import OutputFolder
from xprt_st.quickstart.config import MINED, MODEL

__all__ = ["MINED", "MODEL", "OLDER_KEYS", "check_reuse", "start_stage"]

OLDER_KEYS = tuple(f"recipe_values.{key}" for key in NOT_SHAPING)
"""What the first release of these fingerprints stored and a comparison skips: where the recipe's YAML lived and its
prose, so a folder made from another checkout or install is still the same run."""


def check_reuse(output: Path, folder: OutputFolder, fingerprints: dict[str, dict[str, Any]]) -> None:
    """Refuse, before any work, a rerun that would reuse a stage made with other settings, or one it did not write.

    Args:
        output: the run folder.
        folder: the held run folder (its manifest says which stages the quickstart wrote).
        fingerprints: each stage's (:data:`MINED`, :data:`MODEL`) fingerprint now.

    Raises:
        FingerprintError: one line naming the stage folder, each difference (old -> new) and the ways on.
    """
    own = folder.own()
    for stage, fingerprint in fingerprints.items():
        if stage in own:
            check_stage(output, stage, fingerprint, "-o", ignore=OLDER_KEYS)
        elif (output / stage).exists() or (output / stage).is_symlink():
            raise FingerprintError(
                f"{output / stage} was not written by xprt-st quickstart (its manifest does not list it), so it is "
                f"not taken as its result; move it out of {output}, or give a new -o folder."
            )


def start_stage(folder: OutputFolder, stage: str, fingerprint: dict[str, Any]) -> None:
    """Record ``stage`` as the quickstart's and store its fingerprint in the run folder, before the stage writes
    anything."""
    folder.record(stage)
    write_fingerprint(folder.path, stage, fingerprint)
