"""Evaluation files read into plain data: BEIR-format folders and STS pair files, and their seeded subsamples.

Subsampling (``max_queries`` / ``max_corpus``) is deterministic for a given ``seed``: the kept queries
are a seeded sample of the sorted query ids; the corpus keeps every judged document of the kept
queries and fills up to ``max_corpus`` with a seeded sample of the other documents (sorted ids), so
the relevant documents are always present and the scores stay comparable between models.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from xprt_st.errors import XPRTError

logger = logging.getLogger(__name__)


class TaskLoadError(XPRTError, ValueError):
    """A task name or a local task file could not be turned into an mteb task."""


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


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The numbered lines of a UTF-8 file (plain or ``.gz``); a byte that is not UTF-8 names the file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise TaskLoadError(
                    f"{path}, line {line_number}: byte {raw[error.start : error.start + 1]!r} at column "
                    f"{error.start + 1} is not UTF-8; save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from error


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TaskLoadError(f"{path}, line {line_number}: not valid JSON ({error.msg})") from error
        if not isinstance(record, dict) or "_id" not in record or "text" not in record:
            raise TaskLoadError(f"{path}, line {line_number}: a BEIR record needs '_id' and 'text' fields")
        if not isinstance(record["text"], str):
            raise TaskLoadError(
                f"{path}, line {line_number}: record {record['_id']!r} has text {json.dumps(record['text'])}, "
                'not a string; give its text (or "" for none), or remove the record'
            )
        yield line_number, record


def _by_id(path: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """The records of a BEIR JSONL file by id; a repeated id keeps its last record (as BEIR's loader does), said
    once with the count."""
    records: dict[str, tuple[int, dict[str, Any]]] = {}
    repeated: list[str] = []
    for line_number, record in _read_jsonl(path):
        key = str(record["_id"])
        if key in records:
            repeated.append(f"{key!r} (lines {records[key][0]} and {line_number})")
        records[key] = (line_number, record)
    if repeated:
        logger.warning(
            "%s: %d id(s) appear more than once; the last record of each is kept, as BEIR's loader does (e.g. %s)",
            path,
            len(repeated),
            ", ".join(repeated[:3]),
        )
    return records


def _grade(value: str, path: Path, line_number: int) -> int:
    """A qrels score as the whole-number grade mteb and pytrec_eval score (``1`` and ``1.0`` alike)."""
    try:
        number = float(value)
    except ValueError as error:
        raise TaskLoadError(f"{path}, line {line_number}: score {value!r} is not a number") from error
    if not math.isfinite(number) or number != int(number):
        raise TaskLoadError(
            f"{path}, line {line_number}: score {value!r} is not a whole number; BEIR relevance grades are "
            "0, 1, 2, ... (mteb's scorer, pytrec_eval, takes integers only): map the grades to whole numbers"
        )
    return int(number)


def read_beir_folder(folder: str | Path, split: str = "test") -> BEIRData:
    """Read a BEIR-format folder: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``.

    Judgements whose document or query is absent are dropped with one warning that counts them
    (BEIR ArguAna has 5 judgements pointing to documents missing from its corpus). Queries without
    any remaining judgement are left out, as mteb does; so are queries whose text is empty, counted in a
    warning. An id given twice keeps its last record, as BEIR's loader does, with a warning that counts them.

    Raises:
        TaskLoadError: a missing file (named), a malformed line (file and line): not UTF-8, not JSON, a text that
            is not a string (``null``), a qrels score that is not a finite whole number (pytrec_eval, mteb's
            scorer, takes integer grades only); or no usable judgement.
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
        key: {"title": str(r.get("title") or ""), "text": r["text"]} for key, (_, r) in _by_id(corpus_path).items()
    }
    query_records = {key: r for key, (_, r) in _by_id(queries_path).items()}
    empty = {key for key, r in query_records.items() if not r["text"].strip()}
    if empty:
        logger.warning(
            "%s: %d quer(y/ies) with empty text are left out with their judgements (e.g. %s)",
            queries_path,
            len(empty),
            ", ".join(repr(key) for key in sorted(empty)[:3]),
        )
        query_records = {key: r for key, r in query_records.items() if key not in empty}

    qrels: dict[str, dict[str, int]] = {}
    missing_docs: list[str] = []
    missing_queries: list[str] = []
    judged_at: dict[tuple[str, str], tuple[int, int]] = {}  # (query, document) -> (line, grade) of its judgement
    rejudged: list[str] = []
    conflicting = 0
    for line_number, line in _lines(qrels_path):
        fields = line.rstrip("\n\r").split("\t")
        if not line.strip() or (line_number == 1 and fields[0] == "query-id"):
            continue
        if len(fields) < 3:
            raise TaskLoadError(f"{qrels_path}, line {line_number}: expected query-id<TAB>corpus-id<TAB>score")
        query_id, doc_id = fields[0], fields[1]
        score = _grade(fields[2], qrels_path, line_number)
        if query_id in empty:
            continue  # left out above, with its judgements
        if doc_id not in corpus:
            missing_docs.append(doc_id)
            continue
        if query_id not in query_records:
            missing_queries.append(query_id)
            continue
        earlier = judged_at.get((query_id, doc_id))
        if earlier is not None:
            conflicting += earlier[1] != score
            rejudged.append(f"{query_id!r}/{doc_id!r} (line {earlier[0]}: {earlier[1]}, line {line_number}: {score})")
        judged_at[(query_id, doc_id)] = (line_number, score)
        qrels.setdefault(query_id, {})[doc_id] = score
    if rejudged:
        logger.warning(
            "%s: %d (query, document) pair(s) are judged more than once, %d of them with another grade; the last "
            "judgement of each is kept, as BEIR's loader does (e.g. %s)",
            qrels_path,
            len(rejudged),
            conflicting,
            ", ".join(rejudged[:3]),
        )
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
    queries = {qid: query_records[qid]["text"] for qid in qrels}
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
        """Append ``other``'s pairs."""
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
