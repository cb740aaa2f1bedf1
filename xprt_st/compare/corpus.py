"""The comparison's corpus: a seeded sample of each source, HTML reduced to its main text (or kept raw, with
``keep_html``, for the structure pairs), written once."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
from pathlib import Path
from typing import IO, Any

from xprt_st.compare.config import CompareConfig, CorpusSource

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl.gz"


def _text_field(source: CorpusSource) -> str:
    """The field a ``path`` source's text is read from: its own ``text_field``, else ``html`` or ``text``."""
    return source.text_field or ("html" if source.html else "text")


def corpus_problems(config: CompareConfig, folder: Path) -> list[str]:
    """One line per corpus source that cannot be read, found before any work (an empty list when all can).

    A ``task`` source needs a BEIR folder with a corpus file; a ``path`` source is opened and its first record
    checked for the text and id fields (:func:`xprt_st.mining.reader.check_sources`). A run whose corpus is
    already built in ``folder`` reuses it, so nothing is checked then.
    """
    from xprt_st.mining.reader import CorpusError, check_sources

    if (folder / "corpus_stats.json").is_file() and (folder / CORPUS_FILE).is_file():
        return []
    problems = []
    for index, source in enumerate(config.corpus):
        try:
            if source.task is not None:
                task_corpus_file(config, source.task)
            else:
                text_field = _text_field(source)
                check_sources([config.resolve(source.path)], text_field=text_field, id_field=source.id_field)
        except (FileNotFoundError, CorpusError) as error:
            problems.append(f"corpus[{index}]: {error}")
    return problems


def build_corpus(config: CompareConfig, folder: Path) -> dict[str, Any]:
    """Write the seeded document sample of every source to ``folder/corpus.jsonl.gz`` (once).

    Returns per-source counts (read, sampled, kept, dropped for lack of main text), also written to
    ``folder/corpus_stats.json``; an existing complete corpus is reused as is. A ``keep_html`` source writes
    each kept page's raw HTML (field ``html``) instead of its main text: the same pages (a page without main text
    is left out either way), whose main text mining extracts with the same extractor (:func:`mining_settings`).
    """
    from xprt_st.mining import extract_main_text, iter_corpus

    stats_path = folder / "corpus_stats.json"
    if stats_path.is_file() and (folder / CORPUS_FILE).is_file():
        return json.loads(stats_path.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(config.corpus_seed)
    sources = []
    tmp = folder / f".{CORPUS_FILE}.tmp-{os.getpid()}"
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for source in config.corpus:
            if source.task is not None:
                sources.append(_write_task_documents(config, source, rng, handle))
                continue
            path = config.resolve(source.path)
            text_field = _text_field(source)
            records = [r for r in iter_corpus([path], text_field=text_field, id_field=source.id_field) if r.text]
            chosen = (
                sorted(rng.sample(range(len(records)), source.max_documents))
                if (source.max_documents is not None and source.max_documents < len(records))
                else list(range(len(records)))
            )
            kept = no_text = 0
            for index in chosen:
                record = records[index]
                text = extract_main_text(record.text, record.origin) if source.html else record.text
                if not text:
                    no_text += 1
                    continue
                field = {"html": record.text} if source.keep_html else {"text": text}
                handle.write(json.dumps({"id": f"{path.name}:{record.doc_id}", **field}, ensure_ascii=False) + "\n")
                kept += 1
            sources.append(
                {
                    "path": str(path),
                    "html": source.html,
                    "readable": len(records),
                    "sampled": len(chosen),
                    "kept": kept,
                    "html_no_main_text": no_text,
                    **({"keep_html": True} if source.keep_html else {}),
                }
            )
            logger.info("corpus: %s: %d of %d documents kept", path.name, kept, len(records))
    tmp.replace(folder / CORPUS_FILE)
    stats = {"seed": config.corpus_seed, "sources": sources, "documents": sum(s["kept"] for s in sources)}
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats


def mining_settings(config: CompareConfig) -> dict[str, Any]:
    """What mining the built corpus takes besides ``config.mining``: the documents' own ids for task sources
    (held-out scoring and title work find them) and ``keep_html`` sources (links are resolved by them), and
    ``html`` for a corpus of raw pages (``keep_html``)."""
    settings: dict[str, Any] = {}
    if any(source.task is not None or source.keep_html for source in config.corpus):
        settings["id_field"] = "id"
    if any(source.keep_html for source in config.corpus):
        settings["html"] = True
    settings["precision"] = config.precision
    return settings | config.mining


def task_corpus_file(config: CompareConfig, task: str) -> Path:
    """The ``corpus.jsonl[.gz]`` of the BEIR folder ``task``: a folder under ``data_dir``, a local task name, or a path.

    Raises:
        FileNotFoundError: naming the folders looked in, when none holds a corpus file.
    """
    from xprt_st.evaluation.catalog import LOCAL_TASKS, default_data_dir

    base = Path(config.data_dir) if config.data_dir else default_data_dir()
    spec = LOCAL_TASKS.get(task.lower())
    folder_name = spec.folder if spec is not None and spec.kind == "beir" else task
    candidates = [Path(task).expanduser(), base / folder_name]
    for folder in candidates:
        for name in ("corpus.jsonl", "corpus.jsonl.gz"):
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(
        f"corpus task {task!r}: no corpus.jsonl[.gz] in {' or '.join(str(c) for c in dict.fromkeys(candidates))}; "
        "give a BEIR folder name under data_dir or a BEIR folder path"
    )


def document_text(title: str, text: str, titles: str) -> str:
    """The text pre-training reads for a BEIR document: the title as a first sentence (``prepend``) or none (``drop``).

    A title without closing punctuation gets a full stop, so the passage splitter sees a sentence end there.
    """
    title, text = title.strip(), text.strip()
    if titles == "drop" or not title:
        return text
    if not text:
        return title
    return f"{title}{'' if title[-1] in '.?!:;' else '.'} {text}"


def _write_task_documents(
    config: CompareConfig, source: CorpusSource, rng: random.Random, handle: IO[str]
) -> dict[str, Any]:
    """Write a BEIR task's documents (only its corpus file is opened: never its queries or qrels)."""
    assert source.task is not None
    path = task_corpus_file(config, source.task)
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    with opener(path, "rt", encoding="utf-8") as corpus:
        for line in corpus:
            if line.strip():
                record = json.loads(line)
                records.append((str(record["_id"]), str(record.get("title") or ""), str(record.get("text") or "")))
    records = [r for r in records if r[1].strip() or r[2].strip()]
    chosen = (
        sorted(rng.sample(range(len(records)), source.max_documents))
        if (source.max_documents is not None and source.max_documents < len(records))
        else list(range(len(records)))
    )
    for index in chosen:
        doc_id, title, text = records[index]
        row = {"id": doc_id, "title": title, "text": document_text(title, text, source.titles)}
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    logger.info(
        "corpus: task %s: %d of %d documents kept (titles: %s)", source.task, len(chosen), len(records), source.titles
    )
    return {
        "task": source.task,
        "path": str(path),
        "titles": source.titles,
        "readable": len(records),
        "sampled": len(chosen),
        "kept": len(chosen),
    }
