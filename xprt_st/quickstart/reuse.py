"""Which of the quickstart's stages a rerun into the same ``-o`` may reuse: those made with the same settings.

The quickstart chains two stages into its folder, ``mined/`` and ``model/``; each gets a fingerprint
(:mod:`xprt_st.fingerprint`) before it starts. A rerun reuses a stage only when it is the quickstart's own (in its
manifest) and its fingerprint is equal to the one the rerun would record; otherwise it stops before any work. So a
new ``--recipe``, ``--max-steps``, ``--seed`` or ``--model`` no longer labels the old model with the new settings,
and a new ``--holdout`` no longer re-merges the held-out set of a model that trained on the old draw (the
label-free lines would score it on documents it trained on).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.fingerprint import (
    NOT_SHAPING,
    FingerprintError,
    check_stage,
    corpus_identity,
    recipe_values,
    write_fingerprint,
)
from xprt_st.output_folder import OutputFolder

if TYPE_CHECKING:
    from xprt_st.quickstart.config import QuickstartConfig

MINED, MODEL = "mined", "model"

OLDER_KEYS = tuple(f"recipe_values.{key}" for key in NOT_SHAPING)
"""What the first release of these fingerprints stored and a comparison skips: where the recipe's YAML lived and its
prose, so a folder made from another checkout or install is still the same run."""


def mining_fingerprint(
    config: QuickstartConfig, sources: Sequence[str | Path], mining_fields: dict[str, Any]
) -> dict[str, Any]:
    """What decides ``mined/``: the corpus (files and sizes, or the shipped pages and how many), how it is read
    (``mining_fields``: :meth:`QuickstartConfig.mining_fields`), the mining model, the held-out fraction and the seed
    that draws it, the threshold, the token limit and the precision (resolved: a bf16 mining is not an fp32 one)."""
    return {
        "corpus": corpus_identity(sources),
        "max_documents": config.max_documents,
        **mining_fields,
        "model": config.model,
        "holdout": config.holdout,
        "seed": config.seed,
        "threshold_quantile": config.threshold_quantile,
        "max_seq_length": config.max_seq_length,
        "precision": config.encoding_precision,
    }


def training_fingerprint(config: QuickstartConfig) -> dict[str, Any]:
    """What decides ``model/`` beside its data: the recipe (its name and its file's values, not where the file lives),
    the steps as given (None: the default of the mined groups, themselves fixed by ``mined/``), batch, learning
    rate, token limit, seed, starting model and precision."""
    from xprt_st.recipe import load_recipe

    return {
        "recipe": config.recipe,
        "recipe_values": recipe_values(load_recipe(config.recipe).to_dict()),
        "max_steps": config.max_steps,
        "batch_size": config.batch_size,
        "learning_rate": config.learning_rate,
        "max_seq_length": config.max_seq_length,
        "seed": config.seed,
        "model": config.model,
        "precision": config.precision,
    }


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


def start_stage(config: QuickstartConfig, folder: OutputFolder, stage: str, fingerprint: dict[str, Any]) -> None:
    """Record ``stage`` as the quickstart's and store its fingerprint, before the stage writes anything."""
    folder.record(stage)
    write_fingerprint(config.output, stage, fingerprint)
