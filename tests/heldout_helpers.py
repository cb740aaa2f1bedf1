"""Hand-made held-out parts of mined folders, in the layout ``xprt-st mine --holdout`` writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from datasets import Dataset

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def write_heldout(
    folder: Path,
    passages: Mapping[int, Sequence[str]],
    groups: Sequence[tuple[int, int, Sequence[int]]],
) -> Path:
    """Write ``folder/heldout/{groups,passages}``: ``passages`` maps a document label to its passage texts,
    ``groups`` lists ``(label, anchor_index, related_index best first)``; the text columns are padded to the
    longest group as the miner pads them, ``related_index`` is kept as given."""
    heldout = folder / "heldout"
    rows = [(label, index, text) for label, texts in passages.items() for index, text in enumerate(texts)]
    Dataset.from_dict(
        {"label": [r[0] for r in rows], "passage": [r[1] for r in rows], "text": [r[2] for r in rows]}
    ).save_to_disk(str(heldout / "passages"))
    k = max(len(related) for _, _, related in groups)
    columns: dict[str, list] = {"anchor": [], "positive": [], **{f"related_{i}": [] for i in range(2, k + 1)}}
    for label, anchor, related in groups:
        columns["anchor"].append(passages[label][anchor])
        texts = passages[label]
        padded = [*related, *[related[-1]] * (k - len(related))]  # the miner pads short documents
        for position, index in enumerate(padded):
            name = "positive" if position == 0 else f"related_{position + 1}"
            columns[name].append(texts[index] if index < len(texts) else "")  # a broken index stays broken
    Dataset.from_dict(
        {
            **columns,
            "label": [g[0] for g in groups],
            "anchor_index": [g[1] for g in groups],
            "related_index": [list(g[2]) for g in groups],
        }
    ).save_to_disk(str(heldout / "groups"))
    return folder


def seed_leaving_both(id_lists: Sequence[Sequence[str]], fraction: float, held: int = 1, kept: int = 1) -> int:
    """The first seed whose held-out draw at ``fraction`` holds out at least ``held`` and keeps at least ``kept`` of
    the documents of every id list.

    A document's default id (no ``--id-field``) is its file's absolute path (and line), which the draw hashes, so
    under pytest's numbered folders one fixed seed's draw moves from run to run: a test on a few such documents held
    out all of them in a run now and then (no groups left). A seed picked from the test's own ids keeps its draw
    usable in every folder.
    """
    from xprt_st.mining.holdout import is_held_out

    for seed in range(10_000):
        counts = [(sum(is_held_out(i, fraction, seed) for i in ids), len(ids)) for ids in id_lists]
        if all(count >= held and total - count >= kept for count, total in counts):
            return seed
    raise ValueError(f"no seed below 10,000 holds out {held} and keeps {kept} of every list at {fraction}")


def start_and_moved(model: SentenceTransformer, start: Path, moved: Path) -> tuple[Path, Path]:
    """Save ``model`` to ``start`` and a copy with every weight times 1.5 to ``moved``: a start and a "trained" model
    that ranks otherwise."""
    import copy

    import torch

    model.save(str(start))
    other = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(1.5)
    other.save(str(moved))
    return start, moved
