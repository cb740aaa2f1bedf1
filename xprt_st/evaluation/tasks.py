"""Plain evaluation data wrapped as in-memory mteb tasks, so the scoring code is mteb's own.

mteb's built-in tasks download their data from the Hugging Face hub; these hand mteb an in-memory task
instead (the pattern of ``mteb/mocks/mock_tasks``): pytrec_eval nDCG@10 for retrieval, cosine Spearman
for STS, plus the per-query and per-pair scores the paired bootstraps resample.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from datasets import Dataset, DatasetDict
from mteb.abstasks import AbsTask
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata

from xprt_st.evaluation.readers import BEIRData, STSData
from xprt_st.fingerprint import file_sha256

RETRIEVAL_MAIN_SCORE = "ndcg_at_10"
STS_MAIN_SCORE = "cosine_spearman"
PER_QUERY_KEY = "per_query_ndcg_at_10"
"""Key under which :class:`LocalRetrievalTask` stores each query's nDCG@10 in mteb's scores."""
PER_PAIR_KEY = "per_pair_cosine"
"""Key under which :class:`LocalSTSTask` stores each pair's cosine similarity and gold score (for bootstraps)."""


def _metadata(name: str, task_type: str, main_score: str, description: str, revision: str) -> TaskMetadata:
    # mteb requires a dataset path and revision even though load_data is overridden; the revision is a
    # fingerprint of the files and subsampling, so cached results of different data never mix.
    return TaskMetadata(
        name=name,
        description=description,
        reference=None,
        dataset={"path": "local", "revision": revision},
        type=task_type,
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score=main_score,
        date=None,
        domains=None,
        task_subtypes=None,
        license=None,
        annotations_creators=None,
        dialect=[],
        sample_creation=None,
        bibtex_citation="",
    )


class LocalRetrievalTask(AbsTaskRetrieval):
    """An mteb retrieval task over an in-memory :class:`BEIRData`; use :func:`make_retrieval_task`.

    Besides mteb's usual scores it stores each query's nDCG@10 under :data:`PER_QUERY_KEY`, so the
    per-query analyses work from mteb's own ranking and scoring (and from cached results).
    """

    beir: ClassVar[BEIRData]
    label: ClassVar[str]

    def load_data(self, num_proc: int | None = None, **kwargs: object) -> None:
        """Hand mteb the in-memory split (mteb's hook; nothing is downloaded)."""
        if self.data_loaded:
            return
        from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

        beir = self.beir
        corpus_ids = list(beir.corpus)
        split = RetrievalSplitData(
            queries=Dataset.from_dict({"id": list(beir.queries), "text": list(beir.queries.values())}),
            corpus=Dataset.from_dict(
                {
                    "id": corpus_ids,
                    "text": [beir.corpus[doc_id]["text"] for doc_id in corpus_ids],
                    "title": [beir.corpus[doc_id]["title"] for doc_id in corpus_ids],
                }
            ),
            relevant_docs={qid: dict(docs) for qid, docs in beir.qrels.items()},
            top_ranked=None,
        )
        self.dataset = {"default": {"test": split}}
        self.data_loaded = True

    def task_specific_scores(
        self,
        scores: dict[str, dict[str, float]],
        qrels: dict[str, dict[str, int]],
        results: dict[str, dict[str, float]],
        hf_split: str,
        hf_subset: str,
    ) -> dict[str, Any]:
        """mteb's hook for extra scores: each query's nDCG@10 under :data:`PER_QUERY_KEY`."""
        return {PER_QUERY_KEY: {qid: float(values["ndcg_cut_10"]) for qid, values in scores.items()}}


class LocalSTSTask(AbsTaskSTS):
    """An mteb STS task over an in-memory :class:`STSData`; use :func:`make_sts_task`."""

    sts: ClassVar[STSData]
    label: ClassVar[str]

    def load_data(self, num_proc: int | None = None, **kwargs: object) -> None:
        """Hand mteb the in-memory pairs (mteb's hook; nothing is downloaded)."""
        if self.data_loaded:
            return
        self.dataset = DatasetDict(
            {
                "test": Dataset.from_dict(
                    {"sentence1": self.sts.sentence1, "sentence2": self.sts.sentence2, "score": self.sts.score}
                )
            }
        )
        self.data_loaded = True

    def _calculate_scores(self, scores: Mapping[str, Any], normalized_scores: list[float]) -> dict[str, Any]:
        # Spearman of the whole set has no per-pair parts, so a paired bootstrap over pairs needs the
        # pairs themselves: each one's cosine similarity and gold score, in the order of the data.
        metrics = dict(super()._calculate_scores(scores, normalized_scores))
        metrics[PER_PAIR_KEY] = {
            "cosine": [float(value) for value in scores["cosine_scores"]],
            "gold": [float(value) for value in normalized_scores],
        }
        return metrics


def _fingerprint(*parts: object) -> str:
    return hashlib.sha1(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:12]


def _file_fingerprint(paths: Sequence[Path]) -> str:
    """The files' names and bytes, not where they lie or when they were written: the packaged task in another
    install, or a data folder copied or cloned again, is the same task (its scores and a comparison's reuse hold)."""
    return _fingerprint(*[(p.name, p.stat().st_size, file_sha256(p)) for p in paths])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "task"


def make_retrieval_task(
    data: BEIRData,
    label: str,
    *,
    ignore_identical_ids: bool = False,
    revision: str | None = None,
    description: str | None = None,
) -> LocalRetrievalTask:
    """Wrap a :class:`BEIRData` as an mteb retrieval task named ``label``.

    Args:
        data: the split to evaluate.
        label: the name shown in tables; the mteb task name is ``label`` plus the revision, so results
            cached for other data or another subsample are never reused.
        ignore_identical_ids: never count a document whose id equals the query id (ArguAna's rule:
            a query's own argument is in the corpus and must not be a result).
        revision: a fingerprint of the data; computed from the content when None.
        description: mteb's task description; by default one naming ``label``.
    """
    revision = revision or _fingerprint(sorted(data.qrels.items()), len(data.corpus), sorted(data.corpus)[:50])
    metadata = _metadata(
        f"xprt-st-{_slug(label)}-{revision}",
        "Retrieval",
        RETRIEVAL_MAIN_SCORE,
        description or f"Local BEIR-format retrieval task {label}",
        revision,
    )
    cls = type(
        f"Local_{_slug(label)}",
        (LocalRetrievalTask,),
        {"metadata": metadata, "beir": data, "label": label, "ignore_identical_ids": ignore_identical_ids},
    )
    return cls()


def make_sts_task(
    data: STSData,
    label: str,
    *,
    min_score: float = 0,
    max_score: float = 5,
    revision: str | None = None,
    description: str | None = None,
) -> LocalSTSTask:
    """Wrap an :class:`STSData` as an mteb STS task named ``label`` (main score: cosine Spearman)."""
    revision = revision or _fingerprint(len(data), data.sentence1[:20], data.score[:20])
    metadata = _metadata(
        f"xprt-st-{_slug(label)}-{revision}",
        "STS",
        STS_MAIN_SCORE,
        description or f"Local STS task {label}",
        revision,
    )
    cls = type(
        f"Local_{_slug(label)}",
        (LocalSTSTask,),
        {"metadata": metadata, "sts": data, "label": label, "min_score": min_score, "max_score": max_score},
    )
    return cls()


def task_label(task: AbsTask) -> str:
    """The name shown in tables: a local task's label, else the MTEB task name."""
    return getattr(type(task), "label", None) or task.metadata.name
