"""The named local tasks and the resolution of a task spec (a name, a path, an MTEB name) into an mteb task.

Task specs understood by :func:`resolve_tasks`:

- a named local task (:data:`LOCAL_TASKS`: ``arguana``, ``stsb``, ``sickr``, ``sts12`` ... ``sts15``,
  ``python-faq``), spelled exactly so (lower case), read from ``data_dir`` (default ``$XPRT_DATA_DIR``, else
  ``../shared/data``); ``python-faq`` ships with the package;
- a BEIR folder path: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and ``qrels/test.tsv``;
- an STS file path: a tab-separated file ``sentence1<TAB>sentence2<TAB>score`` (header optional), the
  STS-B 7-field layout, or the SICK layout; or a SemEval STS folder of ``STS.input.*`` / ``STS.gs.*``;
- ``mined:DIR``: the label-free task on the held-out documents of the mined folder ``DIR``
  (:mod:`xprt_st.evaluation.label_free`; subsampling does not apply to it);
- an MTEB task name, spelled as MTEB does (``ArguAna``, ``STS12``): run by mteb from the hub when the hub is
  reachable; when it is not, a name with a local copy runs that copy (with a warning), any other is refused
  in one line.
- ``titles:DIR``: the held-out documents' titles and headings as queries, their passages as the answers
  (:mod:`xprt_st.evaluation.titles`; no subsampling either);

Files are read by :mod:`xprt_st.evaluation.readers` and wrapped by :mod:`xprt_st.evaluation.tasks`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mteb.abstasks import AbsTask

from xprt_st.evaluation.label_free import TASK_PREFIX, label_free_task
from xprt_st.evaluation.readers import (
    BEIRData,
    STSData,
    TaskLoadError,
    _find_file,
    read_beir_folder,
    read_semeval_sts_folder,
    read_sts_file,
    subsample_beir,
    subsample_sts,
)
from xprt_st.evaluation.tasks import (
    LocalRetrievalTask,
    LocalSTSTask,
    _file_fingerprint,
    _fingerprint,
    make_retrieval_task,
    make_sts_task,
    task_label,
)
from xprt_st.evaluation.titles import TASK_PREFIX as TITLES_PREFIX
from xprt_st.evaluation.titles import titles_task

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "XPRT_DATA_DIR"
"""Environment variable that overrides the default folder of the named local tasks."""

PACKAGED_DATA = Path(__file__).resolve().parents[1] / "data"
"""Data shipped inside the package (the ``python-faq`` task)."""


def default_data_dir() -> Path:
    """``$XPRT_DATA_DIR`` when set, else ``../shared/data`` relative to the working directory."""
    return Path(os.environ.get(DATA_DIR_ENV, Path("..") / "shared" / "data"))


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


HUB_PROBE_TIMEOUT = 3.0
"""Seconds to wait for the Hugging Face hub before an MTEB task name counts as unreachable."""

BENCHMARK_DATA_HINT = (
    "docs/evaluation.md ('Benchmark data') lists each task's files and where to download them; "
    "an MTEB task name (e.g. ArguAna) runs from the hub instead when it is reachable"
)
"""How to get the data of a named local task, appended to the error when its folder is missing."""


def _hub_offline() -> bool:
    """True when the Hugging Face hub cannot be used: ``HF_HUB_OFFLINE``, or no answer within a few seconds."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    return not _hub_answers(constants.ENDPOINT)


@functools.cache
def _hub_answers(endpoint: str) -> bool:
    """Whether ``endpoint`` answers an HTTP request at all (any status) within :data:`HUB_PROBE_TIMEOUT`."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=HUB_PROBE_TIMEOUT)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _sts_file(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise TaskLoadError(f"STS folder {folder} has no {name} (nor {name}.gz)")


def local_task_folder(key: str, data_dir: str | Path | None = None) -> Path:
    """The folder of the named local task ``key`` (a key of :data:`LOCAL_TASKS`): packaged, or under ``data_dir``.

    Raises:
        TaskLoadError: the folder does not exist, naming it and how to point at the right data folder.
    """
    spec = LOCAL_TASKS[key]
    base = PACKAGED_DATA if spec.packaged else Path(data_dir) if data_dir is not None else default_data_dir()
    folder = base / spec.folder
    if not folder.is_dir():
        raise TaskLoadError(
            f"task {key!r} needs the folder {folder}, which does not exist; pass --data-dir "
            f"(or set ${DATA_DIR_ENV}) to the folder that holds {spec.folder}/. {BENCHMARK_DATA_HINT}"
        )
    return folder


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
    folder = local_task_folder(key, data_dir)
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
        folder = local_task_folder(key, data_dir)
        return read_beir_folder(folder, split), key, LOCAL_TASKS[key].ignore_identical_ids
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
) -> AbsTask:
    """Turn one task spec (a local name, a path, or an MTEB name) into an mteb task; see the module doc."""
    spec = spec.strip()
    if spec.startswith(TASK_PREFIX):
        return label_free_task(spec[len(TASK_PREFIX) :], max_queries=max_queries, seed=seed)
    if spec.startswith(TITLES_PREFIX):
        return titles_task(spec[len(TITLES_PREFIX) :])
    if spec in LOCAL_TASKS:  # lower-case short names are local; MTEB's own spellings go to mteb below
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
            logger.warning(
                "the Hugging Face hub is not reachable: running MTEB task %s from the local copy %r", spec, local
            )
            return load_local_task(local, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed)
        raise TaskLoadError(
            f"MTEB task {spec!r} needs the Hugging Face hub, which is not reachable (offline, or HF_HUB_OFFLINE); "
            f"offline tasks: {', '.join(LOCAL_TASKS)}, a BEIR folder path, or an STS file path"
        )
    near = next((key for key in LOCAL_TASKS if key == spec.lower()), None)
    hint = f" (the local task is spelled {near!r})" if near is not None else ""
    raise TaskLoadError(
        f"unknown task {spec!r}{hint}: not a local task name ({', '.join(LOCAL_TASKS)}), not mined:DIR or "
        "titles:DIR, not an existing BEIR folder or STS file path, and not an MTEB task name"
    )


def check_sample_sizes(**sizes: int | None) -> None:
    """Refuse a sample size below 1 (``max_queries=0``), naming its flag (``--max-queries``); None keeps all.

    Raises:
        ValueError: one line naming the flag and the value.
    """
    for name, value in sizes.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} {value}: must be at least 1 (leave it out to keep every one)")


def split_task_specs(specs: Sequence[str]) -> list[str]:
    r"""The task names of ``--tasks`` values: each value split at its commas, ``\,`` kept as a comma.

    A value that is, as a whole, an existing path (or ``mined:`` and one) is one task, commas and all, so a folder
    whose name holds a comma can be given as it is; ``\,`` writes a comma inside one name of a list.

    Example:
        >>> split_task_specs(["arguana, stsb", r"mined:runs/a\,b,python-faq"])
        ['arguana', 'stsb', 'mined:runs/a,b', 'python-faq']
    """
    names: list[str] = []
    for spec in specs:
        whole = spec.strip()
        path = whole[len(TASK_PREFIX) :] if whole.startswith(TASK_PREFIX) else whole
        if "," in whole and path and Path(path).expanduser().exists():
            names.append(whole)
            continue
        parts = re.split(r"(?<!\\),", spec)
        names += [part.strip().replace("\\,", ",") for part in parts if part.strip()]
    return names


def resolve_tasks(
    specs: Sequence[str],
    data_dir: str | Path | None = None,
    *,
    max_queries: int | None = None,
    max_corpus: int | None = None,
    seed: int = 0,
) -> list[AbsTask]:
    """Resolve comma-separated or repeated task specs into mteb tasks, in order, without duplicates."""
    check_sample_sizes(max_queries=max_queries, max_corpus=max_corpus)
    names = split_task_specs(specs)
    if not names:
        raise TaskLoadError(f"no task given; valid names: {', '.join(LOCAL_TASKS)}, a BEIR folder or an STS file")
    specs_and_tasks = [
        (name, resolve_task(name, data_dir, max_queries=max_queries, max_corpus=max_corpus, seed=seed))
        for name in dict.fromkeys(names)
    ]
    check_distinct_labels(specs_and_tasks)
    return [task for _, task in specs_and_tasks]


def check_distinct_labels(specs_and_tasks: Sequence[tuple[str, AbsTask]]) -> None:
    """Refuse two tasks that tables would show under one name (``titles:a/mined`` and ``titles:b/mined`` are both
    ``titles:mined``): scores are kept by that name, so one task's scores would be shown as the other's.

    Raises:
        TaskLoadError: naming the specs that share each label.
    """
    by_label: dict[str, list[str]] = {}
    for spec, task in specs_and_tasks:
        by_label.setdefault(task_label(task), []).append(spec)
    shared = {label: specs for label, specs in by_label.items() if len(specs) > 1}
    if shared:
        lines = "; ".join(f"{' and '.join(specs)} are both shown as {label}" for label, specs in shared.items())
        raise TaskLoadError(
            f"{lines}: one's scores would be reported as the other's. Evaluate them in separate runs, or give the "
            "folders different names."
        )
