"""The one chain that follows a merge: hard negatives -> lexical candidates -> structure pairs -> their mix with the
mined groups.

``xprt-st mine``, :func:`xprt_st.mining.mine.mine`, the quickstart and the comparison's data variants all call
:func:`finish_mining`, so each step receives the same settings from every entry point (the seed of the stand-in
negatives included) and a folder that already holds a step's output, made with the same settings, is not redone
(:func:`has_hard_negatives`: the one reuse rule of the chain).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xprt_st.mining.hard_negatives import DEFAULT_MAX_RATIO, add_hard_negatives
from xprt_st.mining.layout import STRUCTURE_DIR, STRUCTURE_MIXED_DIR, read_stats
from xprt_st.mining.lexical_candidates import add_lexical_candidates
from xprt_st.mining.structure import parse_kinds, structure_line, write_mixed_groups, write_structure_groups


@dataclass(frozen=True)
class AfterMerge:
    """The settings of the chain; the defaults add nothing.

    Example:
        >>> AfterMerge(hard_negatives=2, structure="titles,headings").structure
        ('titles', 'headings')
        >>> AfterMerge(2).structure_negatives, AfterMerge(2, structure_hard_negatives=0).structure_negatives
        (2, 0)
    """

    hard_negatives: int = 0
    """Hard negatives per mined group (``negative_1 .. negative_K``); 0 adds none."""
    max_ratio: float = DEFAULT_MAX_RATIO
    """The positive-aware filter of the hard negatives (``--hard-negative-max-ratio``)."""
    lexical_candidates: int = 0
    """BM25's top passages of other documents per mined group (``lexical_1 .. lexical_L``,
    :mod:`xprt_st.mining.lexical_candidates`); 0 adds none."""
    structure: tuple[str, ...] | str | None = ()
    """Structure kinds written to ``DIR/structure`` (titles, headings, links); empty writes none."""
    structure_hard_negatives: int | None = None
    """Hard negatives per structure group; None: :attr:`hard_negatives`."""
    structure_mix: float | None = None
    """With :attr:`structure`: the structure share of ``DIR/structure-mixed``; None writes no mix."""
    seed: int = 0
    """Draws the stand-in negative of a group whose every candidate was filtered, and the mix's rows."""
    batch_size: int = 64
    """Encoder batch of the hard-negative pass."""
    encode_backend: str = "torch"
    """What runs the mining model for the hard negatives (:mod:`xprt_st.encode_backend`)."""
    precision: str | None = None
    """auto, fp32 or bf16 of the hard-negative and structure passes; None: that of mining's stored vectors
    (:mod:`xprt_st.precision`), which are then reused."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "structure", parse_kinds(self.structure))

    @property
    def structure_negatives(self) -> int:
        """Hard negatives per structure group."""
        return self.hard_negatives if self.structure_hard_negatives is None else self.structure_hard_negatives


def has_hard_negatives(folder: str | Path, count: int, max_ratio: float = DEFAULT_MAX_RATIO) -> bool:
    """Whether ``folder`` already holds ``count`` hard negatives per group made with ``max_ratio``.

    A merge rewrites ``stats.json`` without them, so a re-merged folder never passes for one that has them.
    """
    settings = (read_stats(folder) or {}).get("settings", {})
    stored_ratio = settings.get("hard_negative_max_ratio", DEFAULT_MAX_RATIO)
    return int(settings.get("hard_negatives", 0) or 0) == count and float(stored_ratio) == float(max_ratio)


def has_lexical_candidates(folder: str | Path, count: int) -> bool:
    """Whether ``folder`` already holds ``count`` lexical candidates per group (a merge drops them, as it drops the
    hard negatives)."""
    return int((read_stats(folder) or {}).get("settings", {}).get("lexical_candidates", 0) or 0) == count


def finish_mining(
    folder: str | Path,
    steps: AfterMerge,
    *,
    model: Any = None,
    stats: dict[str, Any] | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the chain on the merged mining folder ``folder``; return its ``stats.json`` (``stats`` when no step ran).

    Args:
        folder: a merged mining folder.
        steps: what to add.
        model: the mining model (a SentenceTransformer, a name or path; None: the offline default).
        stats: the merge's statistics, returned when the chain writes none.
        say: receives the lines a command prints (the structure counts, where the mix went).

    Raises:
        xprt_st.mining.hard_negatives.HardNegativesError: the folder cannot give the hard negatives asked for.
        ValueError: structure pairs asked of a run mined before links were kept, or a mix of groups whose columns
            differ.
    """
    folder = Path(folder)
    ran = False
    if steps.hard_negatives > 0 and not has_hard_negatives(folder, steps.hard_negatives, steps.max_ratio):
        ran = True
        add_hard_negatives(
            folder,
            steps.hard_negatives,
            model=model,
            max_ratio=steps.max_ratio,
            batch_size=steps.batch_size,
            seed=steps.seed,
            encode_backend=steps.encode_backend,
            precision=steps.precision,
        )
    if steps.lexical_candidates > 0 and not has_lexical_candidates(folder, steps.lexical_candidates):
        ran = True
        add_lexical_candidates(folder, steps.lexical_candidates, seed=steps.seed)
    if steps.structure:
        ran = True
        found = write_structure_groups(
            folder,
            steps.structure,
            hard_negatives=steps.structure_negatives,
            model=model,
            max_ratio=steps.max_ratio,
            precision=steps.precision,
        )
        if say is not None:
            say(structure_line(found, folder))
        if steps.structure_mix is not None and found["groups"]:
            mixed = write_mixed_groups(
                folder / STRUCTURE_DIR, folder, folder / STRUCTURE_MIXED_DIR, steps.structure_mix, seed=steps.seed
            )
            if say is not None:
                say(f"structure mix: {mixed['structure_mix']} in {folder / STRUCTURE_MIXED_DIR}")
    if stats is not None and not ran:
        return stats
    return read_stats(folder) or stats or {}
