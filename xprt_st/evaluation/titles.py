"""``titles:DIR``: the held-out documents' titles and headings as queries, their passages as the answers.

``xprt-st mine --holdout F`` keeps, for each held-out document, the title (``--title-field``, an HTML page's
``<h1>`` or ``<title>``, a plain-text headline) and the section headings (``<h2>``/``<h3>``, Markdown ``#``) with
the passages each covers, in ``DIR/heldout/titles`` (:mod:`xprt_st.mining.headings`). People wrote these, not
the mining model, so unlike ``mined:DIR`` (:mod:`xprt_st.evaluation.label_free`) the task has no built-in
preference for the model that mined the folder: it is a known-item search of the held-out documents.

**The task.** Each held-out title or heading is a query. Candidates are every held-out passage (all held-out
documents). The relevant passages are those of the query's document (a title) or section (a heading), each with
grade 1; every other passage has 0. A text that names several documents or sections (ArguAna's debate topics
title every argument of a debate; many pages have an "Installation" heading) is one query, answered by each of
them: asked once per document, each copy would count its twins' passages as wrong answers. Texts are the same
when they are equal after case folding and whitespace squashing. The score is nDCG@10 per query (trec_eval's
linear gain, as mteb computes it), averaged over queries. Query ids are ``t<label>-<n>`` (the ``n``-th distinct
title or heading of document ``label``, the first document to use the text), passage ids ``<label>-<passage>``
as in ``mined:DIR``.

**What it can say.** Whether a model finds a document's passages from what its author called it. A heading
that the page repeats in its own text (HTML and Markdown headings start their section) is matched word for
word by any model, so headings are an easier query than titles, which BEIR corpora keep apart from the text.
Whether the task ranks models as labelled tasks do is a question of evidence
(``docs/results/12-titles-and-headings.md``).

**When it says little.** A folder mined without ``--title-field``, ``--html`` or Markdown headings gets its titles
from plain-text first lines that read as headlines (:func:`xprt_st.mining.headings.plain_title`): a real headline in
news files, but elsewhere a document's own opening words, which any model matches. And with fewer than
:data:`FEW_QUERIES` queries one query moves the score by more than a tenth. Both are said (:attr:`TitlesTask.caveat`)
on screen and in the records; fewer than 2 queries are refused (the paired interval needs 2).

Example:
    >>> import numpy as np
    >>> scores = np.array([[0.9, 0.1, 0.8], [0.2, 0.7, 0.1]])
    >>> [round(float(v), 4) for v in ndcg_at_k(scores, [{0, 2}, {1}])]
    [1.0, 1.0]
    >>> [round(float(v), 4) for v in ndcg_at_k(scores, [{1}, {0}])]
    [0.5, 0.6309]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xprt_st.evaluation.bootstrap import Interval, paired_interval, retrieval_items
from xprt_st.evaluation.heldout_checks import HeldoutCheck
from xprt_st.evaluation.label_free import HeldOutError, cosine_scores, read_heldout
from xprt_st.evaluation.readers import BEIRData
from xprt_st.mining.layout import HELDOUT_DIR, HELDOUT_PASSAGES, HELDOUT_TITLES, read_stats

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from xprt_st.evaluation.tasks import LocalRetrievalTask

TASK_PREFIX = "titles:"
"""Task spec prefix: ``titles:DIR`` is the titles-and-headings task of the mined folder ``DIR``."""
K = 10
"""Cut-off of nDCG."""
_CHUNK = 1024
"""Query rows scored at once: bounds memory to ``_CHUNK * passages`` similarities."""
_COLUMNS = ("label", "kind", "level", "text", "passages")
FEW_QUERIES = 10
"""Below this many queries the task gets a caveat: one query moves its mean by 1/N, more than a tenth of the scale."""


class NoTitlesError(HeldOutError):
    """A mined folder's held-out documents have no title or heading to build the task from."""


@dataclass(frozen=True)
class TitlesTask:
    """The titles-and-headings task of one mined folder, ready to score.

    Attributes:
        texts: every held-out passage, ordered by (document label, passage index): the candidates.
        ids: ``"<label>-<passage>"`` of each passage, in the order of ``texts``.
        queries: the title and heading texts.
        query_ids: ``"t<label>-<n>"`` of each query.
        kinds: ``"title"`` or ``"heading"`` for each query.
        relevance: for each query, the rows of ``texts`` that are relevant (grade 1).
        path: the mined folder.
        fingerprint: a hash of the content (the mteb revision of the task).
        first_lines: how many queries are plain-text first lines read as titles (:func:`first_line_titles`).
    """

    texts: list[str]
    ids: list[str]
    queries: list[str]
    query_ids: list[str]
    kinds: list[str]
    relevance: list[frozenset[int]]
    path: Path
    fingerprint: str = ""
    first_lines: int = 0

    @property
    def caveat(self) -> str | None:
        """What makes the score weak evidence (see the module doc), or None; :func:`titles_caveat`."""
        return titles_caveat(len(self.queries), self.first_lines, self.path)

    def qrels(self) -> dict[str, dict[str, int]]:
        """BEIR-style judgements: query id -> passage id -> 1."""
        return {
            qid: {self.ids[row]: 1 for row in sorted(rows)}
            for qid, rows in zip(self.query_ids, self.relevance, strict=True)
        }


def load_titles_task(folder: str | Path) -> TitlesTask:
    """Build the ``titles:DIR`` task of the mined folder ``folder`` (see the module doc).

    Raises:
        HeldOutError: the folder does not exist, has no held-out part, or a title names a passage that
            ``heldout/passages`` does not hold.
        NoTitlesError: the held-out documents have no title or heading (``heldout/titles`` is absent), or
            fewer than 2 (the paired interval needs 2 queries).
    """
    from datasets import load_from_disk

    from xprt_st.mining.derived import derived_folder_problem

    folder = Path(folder)
    if not folder.is_dir():
        raise HeldOutError(f"mined folder {folder} does not exist; give the --output folder of xprt-st mine")
    derived = derived_folder_problem(folder, "titles:{}")
    if derived is not None:
        raise HeldOutError(derived)
    loaded = read_heldout(folder)
    if loaded is None:
        raise HeldOutError(
            f"{folder} has no held-out part ({HELDOUT_DIR}/); mine it with `xprt-st mine ... --holdout 0.1 "
            "--title-field title` to keep a tenth of the documents, with their titles, for this check"
        )
    titles_path = folder / HELDOUT_TITLES
    if not titles_path.is_dir():
        raise NoTitlesError(
            f"{folder}: the held-out documents have no title or heading ({titles_path} is absent); mine with "
            "--title-field FIELD (JSONL/Parquet), --html (pages with <title>/<h1>-<h3>), or a corpus with Markdown "
            "# headings"
        )
    titles = load_from_disk(str(titles_path))
    missing = [column for column in _COLUMNS if column not in titles.column_names]
    if missing:
        raise HeldOutError(f"{titles_path} lacks column(s) {', '.join(missing)}; mine the folder again")
    passages = loaded[1].select_columns(["label", "passage", "text"]).to_dict()
    keyed = sorted(
        zip(passages["label"], passages["passage"], passages["text"], strict=True), key=lambda r: (r[0], r[1])
    )
    row_of = {(int(label), int(passage)): row for row, (label, passage, _) in enumerate(keyed)}
    texts = [str(text) for _, _, text in keyed]
    ids = [f"{label}-{passage}" for label, passage, _ in keyed]
    table = titles.select_columns(list(_COLUMNS)).to_dict()
    queries, query_ids, kinds, relevance, documents = [], [], [], [], []
    per_document: dict[int, int] = {}
    seen: dict[str, int] = {}  # a text already asked: its query
    for number, (label, kind, _, text, covered) in enumerate(zip(*(table[c] for c in _COLUMNS), strict=True)):
        label = int(label)
        unknown = [index for index in covered if (label, int(index)) not in row_of]
        if unknown or not covered:
            raise HeldOutError(
                f"{titles_path}, row {number}: document {label} has no passage {unknown[0] if unknown else '(none)'} "
                f"in {folder / HELDOUT_PASSAGES}; the held-out part is inconsistent, mine the folder again"
            )
        rows = frozenset(row_of[(label, int(index))] for index in covered)
        key = " ".join(str(text).casefold().split())
        if key in seen:  # the same words name several documents or sections: each of them answers the query
            relevance[seen[key]] |= rows
            continue
        n = per_document.get(label, 0)
        per_document[label] = n + 1
        seen[key] = len(queries)
        queries.append(str(text))
        query_ids.append(f"t{label}-{n}")
        kinds.append(str(kind))
        relevance.append(rows)
        documents.append(label)
    if len(queries) < 2:
        raise NoTitlesError(
            f"{titles_path} holds {len(queries)} title(s) or heading(s); the task needs at least 2 for its interval "
            "(mine with a larger --holdout)"
        )
    first_lines = 0
    if titles_from_text(folder):
        openings = {label: texts[row] for (label, passage), row in row_of.items() if passage == 0}
        first_lines = first_line_titles(queries, kinds, documents, openings)
    digest = hashlib.sha1(json.dumps([ids, texts, queries, [sorted(r) for r in relevance]]).encode())
    return TitlesTask(
        texts, ids, queries, query_ids, kinds, relevance, folder, digest.hexdigest()[:12], first_lines=first_lines
    )


def titles_from_text(folder: str | Path) -> bool:
    """Whether ``folder`` was mined without ``--title-field`` and ``--html`` (its ``stats.json`` settings say so), so
    its titles were read from the text: a Markdown ``#`` heading, or a plain-text first line."""
    try:
        settings = (read_stats(folder) or {}).get("settings")
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and not settings.get("title_field") and not settings.get("html")


def first_line_titles(
    queries: Sequence[str], kinds: Sequence[str], labels: Sequence[int], openings: dict[int, str]
) -> int:
    """How many title queries are their document's first words (its first passage starts with them, whitespace
    squashed): in a folder whose titles come from the text, a plain-text first line read as a headline (a Markdown
    title keeps its ``#`` in the passage). ``labels`` is each query's document, ``openings`` each document's first
    passage."""
    found = 0
    for query, kind, label in zip(queries, kinds, labels, strict=True):
        opening = " ".join(openings.get(label, "").split())
        found += kind == "title" and opening.startswith(" ".join(query.split()))
    return found


def titles_caveat(queries: int, first_lines: int, folder: str | Path) -> str | None:
    """The caveat of a titles task with ``queries`` queries, ``first_lines`` of them plain-text first lines; None
    when neither is a concern (see the module doc).

    Example:
        >>> titles_caveat(40, 0, "m") is None
        True
        >>> titles_caveat(2, 2, "m").split("; ")[0]
        'titles:m has only 2 queries, so one query moves its score by 0.5'
    """
    parts = []
    if queries < FEW_QUERIES:
        parts.append(f"titles:{folder} has only {queries} queries, so one query moves its score by {1 / queries:.2g}")
    if first_lines == queries:
        parts.append(
            f"{'they are' if parts else f'its {queries} queries are'} the first lines of plain-text documents read as "
            "headlines (mined without --title-field, --html or Markdown headings), not titles given to them: where a "
            "first line is not a title, the task asks a document for its own opening words"
        )
    elif 2 * first_lines > queries:
        parts.append(f"{first_lines} of its {queries} queries are plain-text first lines read as headlines")
    if not parts:
        return None
    return "; ".join(parts) + "; weak evidence, read it with care (mine with --title-field FIELD or --html if you can)"


# --------------------------------------------------------------------------------------------------
# The math: pure functions of score matrices
# --------------------------------------------------------------------------------------------------


def ndcg_at_k(scores: np.ndarray, relevance: Sequence[frozenset[int] | set[int]], k: int = K) -> np.ndarray:
    """Per-query nDCG@k with binary relevance.

    Args:
        scores: ``(Q, N)`` similarity of each query to each candidate.
        relevance: per query, the candidate columns with grade 1 (at least one).
        k: the cut-off.

    Returns:
        ``(Q,)`` values ``DCG@k / IDCG@k``, ``DCG@k = sum_{i<=k} rel_i / log2(i + 1)`` over the ranking (ties
        broken by column order) and ``IDCG@k`` the same sum with the ``min(k, |relevant|)`` relevant first.
    """
    if len(scores) != len(relevance):
        raise ValueError(f"{len(scores)} score rows and {len(relevance)} judgements differ")
    ranked = np.argsort(-np.asarray(scores, dtype=np.float64), axis=1, kind="stable")[:, :k]
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    values = np.zeros(len(ranked))
    for row, (columns, relevant) in enumerate(zip(ranked, relevance, strict=True)):
        if not relevant:
            raise ValueError(f"query {row} has no relevant candidate")
        gains = np.array([column in relevant for column in columns.tolist()], dtype=float)
        values[row] = float(gains @ discounts[: len(gains)]) / float(discounts[: min(k, len(relevant))].sum())
    return values


def score_embeddings(task: TitlesTask, queries: np.ndarray, passages: np.ndarray, k: int = K) -> dict[str, float]:
    """Per-query nDCG@k given the embeddings of the queries and of every held-out passage."""
    if len(passages) != len(task.texts) or len(queries) != len(task.queries):
        raise ValueError(
            f"{len(queries)} query and {len(passages)} passage embeddings for {len(task.queries)} queries and "
            f"{len(task.texts)} passages"
        )
    values = np.empty(len(task.queries))
    for start in range(0, len(task.queries), _CHUNK):
        stop = min(len(task.queries), start + _CHUNK)
        scores = cosine_scores(queries[start:stop], passages)
        values[start:stop] = ndcg_at_k(scores, task.relevance[start:stop], k)
    return dict(zip(task.query_ids, (float(v) for v in values), strict=True))


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


@dataclass
class TitlesScore:
    """One model on the task: per-query nDCG@10, and the passages' embeddings (for other statistics)."""

    per_query: dict[str, float]
    passage_embeddings: np.ndarray = field(repr=False)

    @property
    def score(self) -> float:
        """Mean nDCG@10 over queries."""
        return float(np.mean(list(self.per_query.values())))


def score_model(
    model: SentenceTransformer, task: TitlesTask, batch_size: int = 32, passages: np.ndarray | None = None
) -> TitlesScore:
    """Score a SentenceTransformer: encode the queries and (unless given) the held-out passages, which are the
    label-free task's and encoded once per model for both
    (:func:`~xprt_st.evaluation.heldout_vectors.heldout_passage_vectors`)."""
    from xprt_st.evaluation.heldout_vectors import heldout_passage_vectors

    if passages is None:
        passages = heldout_passage_vectors(model, task.path, task.texts, task.ids, batch_size)
    queries = model.encode(task.queries, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return TitlesScore(score_embeddings(task, np.asarray(queries, dtype=np.float32), passages), passages)


def difference(model: TitlesScore | dict[str, float], start: TitlesScore | dict[str, float]) -> Interval:
    """Model minus start in nDCG@10, with the paired bootstrap interval over queries."""
    a = model.per_query if isinstance(model, TitlesScore) else model
    b = start.per_query if isinstance(start, TitlesScore) else start
    return paired_interval(retrieval_items(a, b))


def comparison_record(model: dict[str, float], start: dict[str, float]) -> dict[str, Any]:
    """The JSON record of a model against its start on the task: both scores, the difference and its interval."""
    gain = difference(model, start)
    return {
        "measure": "titles and headings nDCG@10 on the held-out documents",
        "queries": len(model),
        "start": float(np.mean(list(start.values()))),
        "model": float(np.mean(list(model.values()))),
        "difference": gain.estimate,
        "ci_low": gain.low,
        "ci_high": gain.high,
        "confidence": gain.confidence,
        "verdict": gain.verdict,
    }


def titles_task(folder: str | Path) -> LocalRetrievalTask:
    """The task as an mteb retrieval task (``xprt-st evaluate --tasks titles:DIR``); mteb scores it."""
    from xprt_st.evaluation.tasks import make_retrieval_task

    task = load_titles_task(folder)
    data = BEIRData(
        corpus={pid: {"title": "", "text": text} for pid, text in zip(task.ids, task.texts, strict=True)},
        queries=dict(zip(task.query_ids, task.queries, strict=True)),
        qrels=task.qrels(),
    )
    return make_retrieval_task(
        data,
        f"{TASK_PREFIX}{Path(folder).resolve().name}",
        ignore_identical_ids=False,
        revision=task.fingerprint,
        description=f"Titles and headings of the held-out documents of {folder} as queries",
    )


# --------------------------------------------------------------------------------------------------
# The check's declaration
# --------------------------------------------------------------------------------------------------


def _check_task(folder: Path) -> TitlesTask | None:
    """The task of ``folder``, None without a held-out part or fewer than 2 titles and headings in it."""
    try:
        return load_titles_task(folder)
    except HeldOutError:  # no held-out part, or no titles in it (NoTitlesError)
        return None


def _check_score(task: TitlesTask, model: SentenceTransformer, passages: np.ndarray) -> TitlesScore:
    return score_model(model, task, passages=passages)


def _check_compare(task: TitlesTask, model: TitlesScore, start: TitlesScore) -> dict[str, Any]:
    record = comparison_record(model.per_query, start.per_query) | {"first_lines": task.first_lines}
    return record | ({"caveat": task.caveat} if task.caveat else {})


TITLES_CHECK = HeldoutCheck("titles", "titles", _check_task, _check_score, _check_compare)
"""The titles check as a :class:`~xprt_st.evaluation.heldout_checks.HeldoutCheck`: its task, a model's score from
its passage vectors and its queries' encoding, and the :func:`comparison_record` with the task's caveat."""
