"""The held-out contract: a run records which documents it trained on, so no later check scores it on them.

``xprt-st mine --holdout F --seed S`` keeps a seeded share of the documents out of training, and the label-free
task (``mined:DIR``) scores a model on them. That score means something only while the model never trained on
those documents. A re-merge with another ``--holdout`` or ``--seed`` moves documents between the two parts. So
does a model trained from a model that itself trained on the folder. After such a change, a held-out document
may be one the model trained on.

So a training run writes :func:`run_record` into ``training_state/config.json`` (key :data:`RECORD_KEY`), and
into every checkpoint:

- ``holdout``: the fraction and seed of the folder it trained on, and ``data``, the folder;
- ``trained`` and ``heldout``: how many documents each part held, each with a fingerprint (SHA-256 of the sorted
  ids, 16 hex digits);
- ``trained_ids``: the 64-bit BLAKE2b hashes of the ids of every document trained on, sorted, base64. That is 8
  bytes a document. It is the union with the ids that the starting model (and a ``--fork-from`` trunk) trained
  on, when their own records say so.

:func:`overlap_problem` counts the documents of a mined folder's held-out part whose id is in a model's
``trained_ids``, and says which setting changed. ``evaluate --tasks mined:DIR``, ``interpolate --select
mined:DIR`` and ``train --keep-best`` refuse such a model. Documents that repeat a training document's text
under another id are counted when the folder is mined (``stats.json``'s ``holdout.contamination``).
:func:`contamination_warning` names them.

A document's id is its ``doc_id`` in ``passages.parquet`` (the ``--id-field`` value, or the reader's
``file:line``); a derived folder (``DIR/structure``, a structure mix) reads its source's
(:func:`~xprt_st.mining.structure.source_folder`). A folder without that file (one made by hand) falls back to the
label, ``#<label>``.

Example:
    >>> import numpy as np
    >>> hashes = id_hashes(["doc-1", "doc-2", "doc-1"])
    >>> len(hashes), bool(np.all(np.diff(hashes.astype(np.float64)) > 0))
    (2, True)
    >>> decode_hashes(encode_hashes(hashes)).tolist() == hashes.tolist()
    True
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xprt_st.columns import LABEL
from xprt_st.evaluation.label_free import HeldOutError
from xprt_st.mining.layout import HELDOUT_PASSAGES, PASSAGES_FILE, STATS_FILE
from xprt_st.training.checkpoints import TRAINING_CONFIG_FILE, TRAINING_STATE_DIR

logger = logging.getLogger(__name__)


class HeldOutContractError(HeldOutError):
    """A model would be scored on held-out documents it trained on."""


RECORD_KEY = "documents"
"""Key of the run's record in ``training_state/config.json``."""


# --------------------------------------------------------------------------------------------------
# Ids and their hashes
# --------------------------------------------------------------------------------------------------


def _hash64(document_id: str) -> int:
    digest = hashlib.blake2b(document_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def id_hashes(ids: Iterable[str]) -> np.ndarray:
    """The sorted, unique 64-bit hashes of ``ids`` (``uint64``)."""
    return np.unique(np.fromiter((_hash64(str(i)) for i in ids), dtype=np.uint64))


def encode_hashes(hashes: np.ndarray) -> str:
    """``hashes`` as base64 of their little-endian bytes."""
    return base64.b64encode(np.asarray(hashes, dtype="<u8").tobytes()).decode("ascii")


def decode_hashes(text: str) -> np.ndarray:
    """The inverse of :func:`encode_hashes`."""
    return np.frombuffer(base64.b64decode(text.encode("ascii")), dtype="<u8").astype(np.uint64)


def fingerprint(ids: Iterable[str]) -> str:
    """16 hex digits of SHA-256 over the sorted, unique ids (one a line)."""
    digest = hashlib.sha256("\n".join(sorted(set(map(str, ids)))).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The documents of a mined folder
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FolderDocuments:
    """The document ids of a mined folder's two parts, and its holdout settings."""

    trained: list[str]
    heldout: list[str]
    fraction: float
    seed: int | None


def _stats(folder: Path) -> dict[str, Any]:
    try:
        stats = json.loads((folder / STATS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stats if isinstance(stats, dict) else {}


def holdout_settings(folder: str | Path) -> tuple[float, int | None]:
    """``(fraction, seed)`` of the holdout a mined folder was last merged with (0 without a held-out part)."""
    stats = _stats(Path(folder))
    holdout = stats.get("holdout") if isinstance(stats.get("holdout"), dict) else {}
    settings = stats.get("settings") if isinstance(stats.get("settings"), dict) else {}
    seed = settings.get("seed")
    return float(holdout.get("fraction", 0.0)), int(seed) if isinstance(seed, int) else None


def folder_documents(folder: str | Path, trained_labels: Iterable[int] | None = None) -> FolderDocuments:
    """The ids of the documents of ``folder``'s training groups and of its held-out part.

    Args:
        folder: a mined folder.
        trained_labels: the ``label`` values of the groups trained on (default: read from the folder's dataset).
    """
    from xprt_st.mining.derived import source_folder

    folder = Path(folder)
    fraction, seed = holdout_settings(folder)
    # a derived folder (DIR/structure, a structure mix) labels its groups with its source's documents
    source = source_folder(folder) if not (folder / PASSAGES_FILE).exists() else None
    passages = (source or folder) / PASSAGES_FILE
    id_of: dict[int, str] = {}
    held = _document_ids(passages, id_of) if passages.exists() else []
    heldout_passages = (source or folder) / HELDOUT_PASSAGES
    if not held and not id_of and heldout_passages.is_dir():
        from datasets import load_from_disk

        held = [f"#{int(label)}" for label in set(load_from_disk(str(heldout_passages))[LABEL])]
    if trained_labels is None:
        from datasets import load_from_disk

        trained_labels = load_from_disk(str(folder)).unique(LABEL)
    trained = sorted({id_of.get(int(label), f"#{int(label)}") for label in trained_labels})
    return FolderDocuments(trained=trained, heldout=sorted(set(held)), fraction=fraction, seed=seed)


def _document_ids(passages: Path, id_of: dict[int, str]) -> list[str]:
    """Fill ``id_of`` (label -> document id) from the mined passages file ``passages``; return the held-out ids.

    Raises:
        xprt_st.training.data.MinedDataError: the file cannot be read (cut short, not parquet), naming it.
    """
    import pyarrow.dataset as ds

    from xprt_st.training.data import MinedDataError

    held: list[str] = []
    try:
        parquet = ds.dataset(str(passages), format="parquet")  # a file, or a folder of one part per chunk
        columns = [name for name in (LABEL, "doc_id", "held_out") if name in parquet.schema.names]
        if "doc_id" not in columns:
            return held
        # one row a passage; a document's passages are contiguous, so its first row stands for it
        for batch in parquet.to_batches(columns=columns, batch_size=65536):
            labels = batch.column(LABEL).to_numpy(zero_copy_only=False)
            firsts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]) if len(labels) else []
            rows = batch.take(np.asarray(firsts, dtype=np.int64)).to_pydict()
            flags = rows.get("held_out") or [False] * len(rows["doc_id"])
            for label, doc_id, is_held in zip(rows[LABEL], rows["doc_id"], flags, strict=True):
                if int(label) not in id_of and is_held:
                    held.append(str(doc_id))
                id_of[int(label)] = str(doc_id)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise MinedDataError(
            f"{passages} cannot be read ({str(error).splitlines()[0]}): it is the mined passages the held-out "
            f"contract reads the document ids from; mine {passages.parent} again"
        ) from error
    return held


# --------------------------------------------------------------------------------------------------
# The record of a run, and the check
# --------------------------------------------------------------------------------------------------


def model_record(model: str | Path) -> dict[str, Any] | None:
    """The held-out record of a model or checkpoint folder trained by xprt-st; None for any other model."""
    path = Path(str(model)) / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8")).get(RECORD_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return record if isinstance(record, dict) and "trained_ids" in record else None


def run_record(
    folder: str | Path, trained_labels: Iterable[int] | None = None, ancestors: Sequence[str | Path | None] = ()
) -> dict[str, Any]:
    """The record a run on the mined folder ``folder`` writes (see the module doc).

    Args:
        folder: the mined folder trained on.
        trained_labels: the labels of the groups trained on (default: all of the folder's).
        ancestors: the starting model and a fork's trunk checkpoint; the documents their records name are
            counted as trained on too.
    """
    documents = folder_documents(folder, trained_labels)
    hashes = id_hashes(documents.trained)
    inherited = []
    for ancestor in ancestors:
        record = model_record(ancestor) if ancestor is not None else None
        if record is not None:
            hashes = np.union1d(hashes, decode_hashes(record["trained_ids"]))
            inherited.append({"model": str(ancestor), "data": record.get("data"), "holdout": record.get("holdout")})
    return {
        "data": str(Path(folder).resolve()),
        "holdout": {"fraction": documents.fraction, "seed": documents.seed},
        "trained": len(documents.trained),
        "trained_fingerprint": fingerprint(documents.trained),
        "heldout": len(documents.heldout),
        "heldout_fingerprint": fingerprint(documents.heldout),
        "inherited": inherited,
        "trained_ids": encode_hashes(hashes),
    }


def count_overlap(record: dict[str, Any], heldout_ids: Sequence[str]) -> int:
    """How many of ``heldout_ids`` (unique) the record's ``trained_ids`` hold."""
    if not heldout_ids:
        return 0
    trained = decode_hashes(record["trained_ids"])
    return int(np.isin(id_hashes(heldout_ids), trained, assume_unique=True).sum())


def _what_changed(record: dict[str, Any], folder: Path, fraction: float, seed: int | None) -> str:
    then = record.get("holdout") or {}
    changes = []
    if then.get("fraction") != fraction:
        changes.append(f"--holdout {then.get('fraction')} -> {fraction}")
    if then.get("seed") != seed:
        changes.append(f"--seed {then.get('seed')} -> {seed}")
    same_folder = record.get("data") == str(folder.resolve())
    if changes and same_folder:
        return f"{folder} was re-merged since the run ({', '.join(changes)})"
    inherited = [entry["model"] for entry in record.get("inherited") or []]
    if inherited:
        return f"the run started from {', '.join(inherited)}, which trained on them"
    drawn = f", drawn with other settings ({', '.join(changes)})" if changes else ""
    return f"the run trained on {record.get('data')}, whose documents {folder} holds out{drawn}"


def overlap_problem(model: str | Path, folder: str | Path, command: str) -> str | None:
    """A message when ``model`` trained on documents that the mined folder ``folder`` now holds out, else None.

    Args:
        model: a model or checkpoint folder (a model xprt-st did not train has no record: None).
        folder: the mined folder whose held-out part would score it.
        command: what would have used the score, for the message (``evaluate --tasks mined:DIR``).
    """
    record = model_record(model)
    if record is None:
        return None
    folder = Path(folder)
    documents = folder_documents(folder, trained_labels=())
    overlap = count_overlap(record, documents.heldout)
    if not overlap:
        return None
    then = record.get("holdout") or {}
    cause = _what_changed(record, folder, documents.fraction, documents.seed)
    return (
        f"{command}: {model} trained on {overlap} of the {len(documents.heldout)} documents that {folder} holds out; "
        f"{cause}, so its label-free score would be inflated. Re-merge with the run's settings (`xprt-st mine "
        f"--merge {folder} --holdout {then.get('fraction')} --seed {then.get('seed')}`), or score it on a mined "
        "folder it never trained on"
    )


def contamination_warning(folder: str | Path) -> str | None:
    """A warning when ``folder``'s held-out documents repeat training documents' text under other ids, else None."""
    holdout = _stats(Path(folder)).get("holdout")
    found = holdout.get("contamination") if isinstance(holdout, dict) else None
    if not isinstance(found, dict) or not (found.get("documents") or found.get("passages")):
        return None
    examples = "; ".join(found.get("examples") or [])
    return (
        f"{folder}: {found.get('documents', 0)} of its {holdout.get('documents')} held-out documents repeat the text "
        f"of a training document under another id, and {found.get('passages', 0)} of its {holdout.get('passages')} "
        "held-out passages are also training passages"
        + (f" (e.g. {examples})" if examples else "")
        + ", so the label-free score is inflated; remove the duplicates from the corpus and mine again"
    )


def check_start(folder: str | Path, models: Sequence[str | Path | None], keep_best: bool) -> None:
    """Before a run scores checkpoints on ``folder``'s held-out part: refuse (``keep_best``) or warn about a start.

    A start (or ``--fork-from`` trunk) that trained on documents the folder now holds out makes every
    label-free score of the run inflated. ``keep_best`` would pick the checkpoint by that score, so it is refused.
    Without it, the scores are only reported, so a warning is logged. Text duplicates under other ids are
    always a warning.

    Raises:
        xprt_st.training.data.MinedDataError: ``keep_best`` and a start that trained on held-out documents.
    """
    from xprt_st.training.data import MinedDataError

    for model in models:
        if model is None:
            continue
        problem = overlap_problem(model, folder, "train --keep-best" if keep_best else "the run's label-free check")
        if problem is not None and keep_best:
            raise MinedDataError(problem)
        if problem is not None:
            logger.warning("%s", problem)
    duplicates = contamination_warning(folder)
    if duplicates is not None:
        logger.warning("%s", duplicates)


def refuse_overlap(models: Iterable[str | Path | None], folder: str | Path, command: str) -> None:
    """Refuse, before any model loads, to score any of ``models`` on the held-out part of ``folder`` it trained on.

    Raises:
        HeldOutContractError: naming the model, how many held-out documents it trained on, and what changed.
    """
    for model in dict.fromkeys(models):
        problem = overlap_problem(model, folder, command) if model is not None else None
        if problem is not None:
            raise HeldOutContractError(problem)
