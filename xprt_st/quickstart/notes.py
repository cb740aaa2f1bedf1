"""The quickstart's notes on what its figures mean: how many passes over the mined groups it trained, and whether
the labelled task (``--task``) ranks the documents it trained on (``--corpus``) or another corpus.

The arithmetic is pure (:func:`training_passes`, :func:`passes_note`, :func:`corpus_overlap`,
:func:`task_corpus_note`); :func:`task_corpus_overlap` reads the two corpora once, keeping ids and 64-bit hashes
of the texts only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

OTHER_CORPUS_SHARE = 0.5
"""Below this share of the task's documents found among the ``--corpus`` documents, the task is another corpus."""


def training_passes(steps: int, batch_size: int, groups: int) -> float:
    """Passes over the mined groups that ``steps`` steps of ``batch_size`` groups make.

    Example:
        >>> round(training_passes(60, 16, 290), 2), training_passes(20, 16, 320)
        (3.31, 1.0)
    """
    return steps * batch_size / max(1, groups)


def passes_note(steps: int, batch_size: int, groups: int) -> str | None:
    """The line that says a run trains more than one pass over its groups (None for one pass or less).

    Every in-domain gain of docs/results/11-in-domain.md came within a third of a pass, and the one run that passed
    over its groups again (3.6 passes over NFCorpus's) lost; the line says so and gives the steps of one pass.
    """
    passes = training_passes(steps, batch_size, groups)
    if passes <= 1 + 1e-9:
        return None
    one_pass = max(1, groups // max(1, batch_size))
    return (
        f"--max-steps {steps} at --batch-size {batch_size} trains {passes:.1f} passes over the {groups} mined groups, "
        "each group seen again: every in-domain gain measured came within a third of a pass, and the one run that "
        "passed over its groups again (3.6 passes, NFCorpus) lost 1.16 nDCG@10 points (docs/results/11-in-domain.md); "
        f"--max-steps {one_pass} is one pass"
    )


def text_key(text: str) -> int:
    """A 64-bit hash of a text with its whitespace collapsed: equal for the same words, however laid out."""
    digest = hashlib.blake2b(" ".join(text.split()).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def corpus_overlap(
    task_documents: Iterable[tuple[str, str]], corpus_ids: set[str], corpus_texts: set[int]
) -> dict[str, Any]:
    """How many of a task's ``(id, text)`` documents are among a corpus's, by the same id or the same text
    (:func:`text_key`).

    Example:
        >>> corpus_overlap([("a", "x y"), ("b", "other"), ("c", "z")], {"a"}, {text_key("z")})
        {'documents': 3, 'found': 2, 'share': 0.6667}
    """
    total = found = 0
    for doc_id, text in task_documents:
        total += 1
        found += doc_id in corpus_ids or text_key(text) in corpus_texts
    return {"documents": total, "found": found, "share": round(found / total, 4) if total else 0.0}


def task_corpus_note(task: str, overlap: dict[str, Any]) -> str | None:
    """The line that says the labelled task ranks another corpus than the one trained on; None when at least
    :data:`OTHER_CORPUS_SHARE` of its documents are ``--corpus`` documents."""
    if overlap["documents"] == 0 or overlap["share"] >= OTHER_CORPUS_SHARE:
        return None
    return (
        f"--task {task}: {overlap['found']} of its {overlap['documents']} corpus documents ({overlap['share']:.0%}) "
        "are --corpus documents (same id or same text), so its score ranks another corpus than the one trained on: "
        "it measures transfer to that corpus, not retrieval in yours (give the task of your documents to measure that)"
    )


def task_corpus_overlap(task: Path, sources: list[str | Path], mining_fields: dict[str, Any]) -> dict[str, Any]:
    """:func:`corpus_overlap` of the BEIR folder ``task``'s corpus with the documents ``sources`` (read with the
    mining's fields, ``QuickstartConfig.mining_fields``), each corpus read once."""
    from xprt_st.evaluation.readers import read_beir_folder
    from xprt_st.mining.config import MiningConfig
    from xprt_st.mining.reader import iter_corpus

    mining = MiningConfig(**mining_fields)
    corpus_ids: set[str] = set()
    corpus_texts: set[int] = set()
    for record in iter_corpus(
        sources,
        text_field=mining.resolved_text_field,
        id_field=mining.id_field,
        fallback_text_field=mining.fallback_text_field,
        skip_unreadable=True,
    ):
        corpus_ids.add(record.doc_id)
        if record.text:
            corpus_texts.add(text_key(record.text))
    data = read_beir_folder(task, "test")
    documents = ((doc_id, fields.get("text") or "") for doc_id, fields in data.corpus.items())
    return corpus_overlap(documents, corpus_ids, corpus_texts)
