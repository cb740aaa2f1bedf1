"""Offline evaluation data: BEIR-format folders and STS files turned into mteb tasks.

mteb's built-in tasks download their data from the Hugging Face hub. Everything here reads local
files instead and hands mteb an in-memory task (the pattern of ``mteb/mocks/mock_tasks``), so the
scoring code is mteb's own: pytrec_eval nDCG@10 for retrieval, cosine Spearman for STS.

Task specs understood by :func:`resolve_tasks`:

- a named local task (:data:`LOCAL_TASKS`: ``arguana``, ``stsb``, ``sickr``, ``sts12`` ... ``sts15``,
  ``python-faq``), read from ``data_dir`` (default ``../shared/data`` or ``$XPRT_DATA_DIR``);
- a BEIR folder path: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and ``qrels/test.tsv``;
- an STS file path: a tab-separated file ``sentence1<TAB>sentence2<TAB>score`` (header optional), the
  STS-B 7-field layout, or the SICK layout; or a SemEval STS folder of ``STS.input.*`` / ``STS.gs.*``;
- an MTEB task name (e.g. ``ArguAna``) when the hub is reachable; offline, names that have a local
  equivalent fall back to it.

Subsampling (``max_queries`` / ``max_corpus``) is deterministic for a given ``seed``: the kept queries
are a seeded sample of the sorted query ids; the corpus keeps every judged document of the kept
queries and fills up to ``max_corpus`` with a seeded sample of the other documents (sorted ids), so
the relevant documents are always present and the scores stay comparable between models.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from datasets import Dataset, DatasetDict
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "XPRT_DATA_DIR"
"""Environment variable that overrides the default folder of the named local tasks."""

PACKAGED_DATA = Path(__file__).resolve().parents[1] / "data"
"""Data shipped inside the package (the ``python-faq`` task)."""

RETRIEVAL_MAIN_SCORE = "ndcg_at_10"
STS_MAIN_SCORE = "cosine_spearman"
PER_QUERY_KEY = "per_query_ndcg_at_10"
"""Key under which :class:`LocalRetrievalTask` stores each query's nDCG@10 in mteb's scores."""
PER_PAIR_KEY = "per_pair_cosine"
"""Key under which :class:`LocalSTSTask` stores each pair's cosine similarity and gold score (for bootstraps)."""


class TaskLoadError(ValueError):
    """A task name or a local task file could not be turned into an mteb task."""


def default_data_dir() -> Path:
    """``$XPRT_DATA_DIR`` when set, else ``../shared/data`` relative to the working directory."""
    return Path(os.environ.get(DATA_DIR_ENV, Path("..") / "shared" / "data"))


# --------------------------------------------------------------------------------------------------
# Plain data: BEIR folders
# --------------------------------------------------------------------------------------------------


@dataclass
class BEIRData:
    """A BEIR retrieval split held in memory.

    Attributes:
        corpus: document id -> ``{"title": ..., "text": ...}``.
        queries: query id -> text (only queries that have judgements).
        qrels: query id -> {document id -> relevance}; every id in it exists in ``queries``/``corpus``.
        query_records: query id -> the full JSON record of the query (for sub-domain fields).
        dropped_qrels: judgements dropped because their document or query is absent.
    """

    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    query_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    dropped_qrels: int = 0

    def document_text(self, doc_id: str) -> str:
        """The text a model reads for a document: title and text joined, as mteb does."""
        doc = self.corpus[doc_id]
        return f"{doc.get('title', '')} {doc['text']}".strip()


def _find_file(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise TaskLoadError(
        f"BEIR folder {folder} has no {stem} (nor {stem}.gz); a BEIR folder needs corpus.jsonl, "
        "queries.jsonl and qrels/<split>.tsv"
    )


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with _open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise TaskLoadError(f"{path}, line {line_number}: not valid JSON ({error.msg})") from error
            if not isinstance(record, dict) or "_id" not in record or "text" not in record:
                raise TaskLoadError(f"{path}, line {line_number}: a BEIR record needs '_id' and 'text' fields")
            yield line_number, record


def read_beir_folder(folder: str | Path, split: str = "test") -> BEIRData:
    """Read a BEIR-format folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``.

    Judgements whose document or query is absent are dropped with one warning that counts them
    (BEIR ArguAna has 5 judgements pointing to documents missing from its corpus). Queries without
    any remaining judgement are left out, as mteb does.

    Raises:
        TaskLoadError: a missing file (named), a malformed line (file and line), or no usable judgement.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskLoadError(f"BEIR folder {folder} does not exist")
    corpus_path = _find_file(folder, "corpus.jsonl")
    queries_path = _find_file(folder, "queries.jsonl")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        present = sorted(p.name for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise TaskLoadError(
            f"BEIR folder {folder} has no qrels/{split}.tsv" + (f" (found: {', '.join(present)})" if present else "")
        )

    corpus = {
        str(r["_id"]): {"title": str(r.get("title") or ""), "text": str(r["text"])} for _, r in _read_jsonl(corpus_path)
    }
    query_records = {str(r["_id"]): r for _, r in _read_jsonl(queries_path)}

    qrels: dict[str, dict[str, int]] = {}
    missing_docs: list[str] = []
    missing_queries: list[str] = []
    with qrels_path.open("r", encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.rstrip("\n\r").split("\t")
            if not line.strip() or (line_number == 1 and fields[0] == "query-id"):
                continue
            if len(fields) < 3:
                raise TaskLoadError(f"{qrels_path}, line {line_number}: expected query-id<TAB>corpus-id<TAB>score")
            query_id, doc_id = fields[0], fields[1]
            try:
                score = int(float(fields[2]))
            except ValueError as error:
                raise TaskLoadError(f"{qrels_path}, line {line_number}: score {fields[2]!r} is not a number") from error
            if doc_id not in corpus:
                missing_docs.append(doc_id)
                continue
            if query_id not in query_records:
                missing_queries.append(query_id)
                continue
            qrels.setdefault(query_id, {})[doc_id] = score
    if missing_docs:
        logger.warning(
            "%s: dropped %d judgement(s) whose document is not in the corpus (e.g. %s)",
            qrels_path,
            len(missing_docs),
            ", ".join(missing_docs[:3]),
        )
    if missing_queries:
        logger.warning(
            "%s: dropped %d judgement(s) whose query is not in queries (e.g. %s)",
            qrels_path,
            len(missing_queries),
            ", ".join(missing_queries[:3]),
        )
    qrels = {qid: docs for qid, docs in qrels.items() if any(score > 0 for score in docs.values())}
    if not qrels:
        raise TaskLoadError(f"{qrels_path}: no judgement with a positive score refers to a known query and document")
    queries = {qid: str(query_records[qid]["text"]) for qid in qrels}
    return BEIRData(
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        query_records={qid: query_records[qid] for qid in qrels},
        dropped_qrels=len(missing_docs) + len(missing_queries),
    )


def subsample_beir(
    data: BEIRData, *, max_queries: int | None = None, max_corpus: int | None = None, seed: int = 0
) -> BEIRData:
    """Deterministically shrink a BEIR split so that a quick run fits on a CPU.

    Queries: a ``random.Random(seed)`` sample of ``max_queries`` of the sorted query ids (all when None).
    Corpus: every judged document of the kept queries, plus a seeded sample of the other documents
    (sorted ids) up to ``max_corpus`` in total (judged documents are kept even beyond the limit).
    """
    query_ids = sorted(data.qrels)
    if max_queries is not None and max_queries < len(query_ids):
        query_ids = sorted(random.Random(seed).sample(query_ids, max_queries))
    kept_qrels = {qid: data.qrels[qid] for qid in query_ids}
    corpus_ids = set(data.corpus)
    if max_corpus is not None and max_corpus < len(data.corpus):
        judged = {doc_id for docs in kept_qrels.values() for doc_id in docs}
        others = sorted(set(data.corpus) - judged)
        room = max(0, max_corpus - len(judged))
        corpus_ids = judged | set(random.Random(seed + 1).sample(others, min(room, len(others))))
    return replace(
        data,
        corpus={doc_id: doc for doc_id, doc in data.corpus.items() if doc_id in corpus_ids},
        queries={qid: data.queries[qid] for qid in query_ids},
        qrels=kept_qrels,
        query_records={qid: data.query_records[qid] for qid in query_ids if qid in data.query_records},
    )


# --------------------------------------------------------------------------------------------------
# Plain data: STS files
# --------------------------------------------------------------------------------------------------


@dataclass
class STSData:
    """Sentence pairs with gold similarity scores."""

    sentence1: list[str]
    sentence2: list[str]
    score: list[float]

    def __len__(self) -> int:
        return len(self.score)

    def extend(self, other: STSData) -> None:
        self.sentence1.extend(other.sentence1)
        self.sentence2.extend(other.sentence2)
        self.score.extend(other.score)


def _float_field(value: str, path: Path, line_number: int) -> float:
    try:
        return float(value)
    except ValueError as error:
        raise TaskLoadError(f"{path}, line {line_number}: score {value!r} is not a number") from error


def read_sts_file(path: str | Path) -> STSData:
    """Read an STS pairs file (plain or ``.gz``), detecting its layout from the first line.

    Layouts: SICK (header ``pair_ID sentence_A sentence_B relatedness_score ...``); STS-B (7+ tab fields:
    genre, file, year, id, score, sentence1, sentence2); generic ``sentence1<TAB>sentence2<TAB>score``
    with an optional header line naming the columns. Fields are split on tabs only (sentences contain
    quotes, so no CSV quoting).
    """
    path = Path(path)
    if not path.is_file():
        raise TaskLoadError(f"STS file {path} does not exist")
    data = STSData([], [], [])
    layout: str | None = None
    with _open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.rstrip("\n\r").split("\t")
            if not line.strip():
                continue
            if layout is None:
                if fields[0] == "pair_ID":
                    layout = "sick"
                    continue
                if len(fields) >= 7:
                    layout = "stsb"
                elif len(fields) == 3:
                    layout = "generic"
                    try:
                        float(fields[2])
                    except ValueError:
                        continue
                else:
                    raise TaskLoadError(
                        f"{path}, line {line_number}: {len(fields)} tab-separated fields; expected "
                        "sentence1<TAB>sentence2<TAB>score, the STS-B 7-field layout, or the SICK layout"
                    )
            if layout == "sick":
                s1, s2, score = fields[1], fields[2], fields[3]
            elif layout == "stsb":
                if len(fields) < 7:
                    raise TaskLoadError(f"{path}, line {line_number}: expected at least 7 tab-separated fields")
                s1, s2, score = fields[5], fields[6], fields[4]
            else:
                if len(fields) != 3:
                    raise TaskLoadError(f"{path}, line {line_number}: expected 3 tab-separated fields")
                s1, s2, score = fields
            data.sentence1.append(s1)
            data.sentence2.append(s2)
            data.score.append(_float_field(score, path, line_number))
    if not data.score:
        raise TaskLoadError(f"STS file {path} holds no sentence pairs")
    return data


def read_semeval_sts_folder(folder: str | Path) -> STSData:
    """Read every ``STS.input.<set>.txt[.gz]`` with its ``STS.gs.<set>.txt[.gz]`` in a SemEval STS folder.

    Sets are read in sorted order and concatenated, as MTEB's STS12-15 tasks use all pairs of a year;
    pairs without a gold score (an empty line, as in STS16) are skipped.
    """
    folder = Path(folder)
    inputs = sorted(folder.glob("STS.input.*.txt*"))
    if not inputs:
        raise TaskLoadError(f"STS folder {folder} has no STS.input.<set>.txt[.gz] files")
    data = STSData([], [], [])
    for input_path in inputs:
        name = input_path.name.removeprefix("STS.input.").removesuffix(".gz")
        gold_path = _find_file(folder, f"STS.gs.{name}")
        with _open_text(input_path) as inputs_handle, _open_text(gold_path) as gold_handle:
            pairs = inputs_handle.read().splitlines()
            gold = gold_handle.read().splitlines()
        if len(pairs) != len(gold):
            raise TaskLoadError(f"{input_path} has {len(pairs)} lines but {gold_path} has {len(gold)}")
        for line_number, (pair, score) in enumerate(zip(pairs, gold, strict=True), start=1):
            if not score.strip():
                continue
            fields = pair.split("\t")
            if len(fields) < 2:
                raise TaskLoadError(f"{input_path}, line {line_number}: expected sentence1<TAB>sentence2")
            data.sentence1.append(fields[0])
            data.sentence2.append(fields[1])
            data.score.append(_float_field(score, gold_path, line_number))
    return data


def subsample_sts(data: STSData, max_pairs: int | None, seed: int = 0) -> STSData:
    """A seeded sample of ``max_pairs`` pairs, kept in file order (all pairs when None)."""
    if max_pairs is None or max_pairs >= len(data):
        return data
    keep = sorted(random.Random(seed).sample(range(len(data)), max_pairs))
    return STSData([data.sentence1[i] for i in keep], [data.sentence2[i] for i in keep], [data.score[i] for i in keep])


# --------------------------------------------------------------------------------------------------
# mteb tasks
# --------------------------------------------------------------------------------------------------


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

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
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
        qrels: Any,
        results: dict[str, dict[str, float]],
        hf_split: str,
        hf_subset: str,
    ) -> dict[str, Any]:
        return {PER_QUERY_KEY: {qid: float(values["ndcg_cut_10"]) for qid, values in scores.items()}}


class LocalSTSTask(AbsTaskSTS):
    """An mteb STS task over an in-memory :class:`STSData`; use :func:`make_sts_task`."""

    sts: ClassVar[STSData]
    label: ClassVar[str]

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
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

    def _calculate_scores(self, scores: Any, normalized_scores: list[float]) -> dict[str, Any]:
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
    return _fingerprint(*[(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths])


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


# --------------------------------------------------------------------------------------------------
# Named tasks and spec resolution
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalTaskSpec:
    """Where a named local task lives and how to read it.

    Attributes:
        kind: ``"beir"``, ``"sts-files"`` (listed files, concatenated) or ``"semeval"`` (an STS year folder).
        folder: folder under the data directory (or an absolute path for packaged data).
        files: for ``"sts-files"``, the files inside ``folder``, in order.
        mteb_name: the MTEB task it reproduces, if any.
        ignore_identical_ids: for retrieval, ArguAna's rule that a query's own id is never a result.
        min_score, max_score: the gold score range (STS).
    """

    kind: str
    folder: str
    files: tuple[str, ...] = ()
    mteb_name: str | None = None
    ignore_identical_ids: bool = False
    min_score: float = 0
    max_score: float = 5
    packaged: bool = False


LOCAL_TASKS: dict[str, LocalTaskSpec] = {
    "arguana": LocalTaskSpec("beir", "arguana", mteb_name="ArguAna", ignore_identical_ids=True),
    "stsb": LocalTaskSpec("sts-files", "stsbenchmark", ("sts-test.csv",), mteb_name="STSBenchmark"),
    "sickr": LocalTaskSpec(
        "sts-files",
        "sickr",
        ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"),
        mteb_name="SICK-R",
        min_score=1,
    ),
    "sts12": LocalTaskSpec("semeval", "sts12", mteb_name="STS12"),
    "sts13": LocalTaskSpec("semeval", "sts13", mteb_name="STS13"),
    "sts14": LocalTaskSpec("semeval", "sts14", mteb_name="STS14"),
    "sts15": LocalTaskSpec("semeval", "sts15", mteb_name="STS15"),
    "python-faq": LocalTaskSpec("beir", "python-faq", packaged=True),
}
"""Named local tasks: ``arguana``, ``stsb``, ``sickr`` (all 9,927 pairs, as MTEB), ``sts12``-``sts15``
(all sets of the year) read from the data directory, and ``python-faq`` shipped with the package."""


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _sts_file(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise TaskLoadError(f"STS folder {folder} has no {name} (nor {name}.gz)")


def load_local_task(
    name: str,
    data_dir: str | Path | None = None,
    *,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
) -> LocalRetrievalTask | LocalSTSTask:
    """Build the named local task (a key of :data:`LOCAL_TASKS`), reading from ``data_dir``.

    ``max_queries`` subsamples retrieval queries (or STS pairs); ``max_corpus`` the retrieval corpus.
    """
    key = name.lower()
    if key not in LOCAL_TASKS:
        raise TaskLoadError(f"unknown local task {name!r}; valid names: {', '.join(LOCAL_TASKS)}")
    spec = LOCAL_TASKS[key]
    base = PACKAGED_DATA if spec.packaged else Path(data_dir) if data_dir is not None else default_data_dir()
    folder = base / spec.folder
    if not folder.is_dir():
        raise TaskLoadError(
            f"task {key!r} needs the folder {folder}, which does not exist; pass --data-dir "
            f"(or set ${DATA_DIR_ENV}) to the folder that holds {spec.folder}/"
        )
    if spec.kind == "beir":
        return beir_task(
            folder,
            label=key,
            ignore_identical_ids=spec.ignore_identical_ids,
            max_queries=max_queries,
            max_corpus=max_corpus,
            seed=seed,
        )
    if spec.kind == "semeval":
        paths = sorted(folder.glob("STS.*.txt*"))
        data = read_semeval_sts_folder(folder)
    else:
        paths = [_sts_file(folder, file) for file in spec.files]
        data = STSData([], [], [])
        for path in paths:
            data.extend(read_sts_file(path))
    data = subsample_sts(data, max_queries, seed)
    return make_sts_task(
        data,
        key,
        min_score=spec.min_score,
        max_score=spec.max_score,
        revision=_fingerprint(_file_fingerprint(paths), max_queries, seed),
    )


def beir_task(
    folder: str | Path,
    *,
    label: str | None = None,
    ignore_identical_ids: bool | None = None,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
    split: str = "test",
) -> LocalRetrievalTask:
    """An mteb retrieval task from a BEIR folder, optionally subsampled (see :func:`subsample_beir`).

    ``ignore_identical_ids`` None means: on when some query id is also a corpus id (as in ArguAna,
    where a query's own argument sits in the corpus), which is the only case where it matters.
    """
    folder = Path(folder)
    data = read_beir_folder(folder, split)
    if ignore_identical_ids is None:
        # decided on the full data: a subsample may leave a query's own document out of the corpus
        ignore_identical_ids = any(qid in data.corpus for qid in data.queries)
    full_size = (len(data.queries), len(data.corpus))
    data = subsample_beir(data, max_queries=max_queries, max_corpus=max_corpus, seed=seed)
    if (len(data.queries), len(data.corpus)) != full_size:
        logger.info(
            "%s: subsampled to %d of %d queries and %d of %d documents (seed %d)",
            folder,
            len(data.queries),
            full_size[0],
            len(data.corpus),
            full_size[1],
            seed,
        )
    files = [_find_file(folder, "corpus.jsonl"), _find_file(folder, "queries.jsonl"), folder / "qrels" / f"{split}.tsv"]
    revision = _fingerprint(_file_fingerprint(files), max_queries, max_corpus, seed, ignore_identical_ids)
    return make_retrieval_task(data, label or folder.name, ignore_identical_ids=ignore_identical_ids, revision=revision)


def resolve_beir(spec: str, data_dir: str | Path | None = None, split: str = "test") -> tuple[BEIRData, str, bool]:
    """Read a retrieval task given as a named local BEIR task or a BEIR folder path.

    Returns the data, its label and whether a query's own id must never be a result.
    """
    key = spec.strip().lower()
    if key in LOCAL_TASKS and LOCAL_TASKS[key].kind == "beir":
        task_spec = LOCAL_TASKS[key]
        base = PACKAGED_DATA if task_spec.packaged else Path(data_dir) if data_dir is not None else default_data_dir()
        folder = base / task_spec.folder
        if not folder.is_dir():
            raise TaskLoadError(
                f"task {key!r} needs the folder {folder}, which does not exist; pass --data-dir "
                f"(or set ${DATA_DIR_ENV}) to the folder that holds {task_spec.folder}/"
            )
        return read_beir_folder(folder, split), key, task_spec.ignore_identical_ids
    folder = Path(spec).expanduser()
    if folder.is_dir():
        data = read_beir_folder(folder, split)
        return data, folder.name, any(qid in data.corpus for qid in data.queries)
    retrieval = [name for name, value in LOCAL_TASKS.items() if value.kind == "beir"]
    raise TaskLoadError(
        f"unknown retrieval task {spec!r}: give a local retrieval task ({', '.join(retrieval)}) or a BEIR folder path"
    )


def valid_task_names() -> list[str]:
    """The names :func:`resolve_tasks` accepts besides paths (and MTEB names when online)."""
    return list(LOCAL_TASKS)


def resolve_task(
    spec: str,
    data_dir: str | Path | None = None,
    *,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
) -> Any:
    """Turn one task spec (a local name, a path, or an MTEB name) into an mteb task; see the module doc."""
    spec = spec.strip()
    if spec.lower() in LOCAL_TASKS:
        return load_local_task(spec, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed)
    path = Path(spec).expanduser()
    if path.is_dir():
        if any(path.glob("corpus.jsonl*")) or (path / "qrels").is_dir() or any(path.glob("queries.jsonl*")):
            return beir_task(path, max_queries=max_queries, max_corpus=max_corpus, seed=seed)
        if any(path.glob("STS.input.*")):
            data = subsample_sts(read_semeval_sts_folder(path), max_queries, seed)
            revision = _fingerprint(_file_fingerprint(sorted(path.glob("STS.*.txt*"))), max_queries, seed)
            return make_sts_task(data, path.name, revision=revision)
        raise TaskLoadError(
            f"folder {path} is neither a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
            "nor a SemEval STS folder (STS.input.*.txt with STS.gs.*.txt)"
        )
    if path.is_file():
        data = subsample_sts(read_sts_file(path), max_queries, seed)
        return make_sts_task(data, path.name, revision=_fingerprint(_file_fingerprint([path]), max_queries, seed))

    import mteb

    try:
        hub_task = mteb.get_task(spec)
    except KeyError:
        hub_task = None
    if hub_task is not None:
        local = next((key for key, value in LOCAL_TASKS.items() if value.mteb_name == spec), None)
        if not _hub_offline():
            if max_queries is not None or max_corpus is not None:
                logger.warning("--max-queries/--max-corpus apply to local tasks only; %s runs in full", spec)
            return hub_task
        if local is not None:
            logger.info("the hub is offline: running MTEB task %s from the local copy %r", spec, local)
            return load_local_task(local, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed)
        raise TaskLoadError(
            f"MTEB task {spec!r} needs the Hugging Face hub, which is offline (HF_HUB_OFFLINE); "
            f"offline tasks: {', '.join(LOCAL_TASKS)}, a BEIR folder path, or an STS file path"
        )
    raise TaskLoadError(
        f"unknown task {spec!r}: not a local task name ({', '.join(LOCAL_TASKS)}), not an existing "
        "BEIR folder or STS file path, and not an MTEB task name"
    )


def resolve_tasks(
    specs: Sequence[str],
    data_dir: str | Path | None = None,
    *,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
) -> list[Any]:
    """Resolve comma-separated or repeated task specs into mteb tasks, in order, without duplicates."""
    names = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    if not names:
        raise TaskLoadError(f"no task given; valid names: {', '.join(LOCAL_TASKS)}, a BEIR folder or an STS file")
    tasks = []
    for name in dict.fromkeys(names):
        tasks.append(resolve_task(name, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed))
    return tasks


def task_label(task: Any) -> str:
    """The name shown in tables: a local task's label, else the MTEB task name."""
    return getattr(type(task), "label", None) or task.metadata.name
