"""The comparison's corpus: a seeded sample of each source, HTML reduced to its main text, written once."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

from xprt_st.compare.config import CompareConfig

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl.gz"


def build_corpus(config: CompareConfig, folder: Path) -> dict[str, Any]:
    """Write the seeded document sample of every source to ``folder/corpus.jsonl.gz`` (once).

    Returns per-source counts (read, sampled, kept, dropped for lack of main text), also written to
    ``folder/corpus_stats.json``; an existing complete corpus is reused as is.
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
            path = config.resolve(source.path)
            text_field = source.text_field or ("html" if source.html else "text")
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
                handle.write(
                    json.dumps({"id": f"{path.name}:{record.doc_id}", "text": text}, ensure_ascii=False) + "\n"
                )
                kept += 1
            sources.append(
                {
                    "path": str(path),
                    "html": source.html,
                    "readable": len(records),
                    "sampled": len(chosen),
                    "kept": kept,
                    "html_no_main_text": no_text,
                }
            )
            logger.info("corpus: %s: %d of %d documents kept", path.name, kept, len(records))
    tmp.replace(folder / CORPUS_FILE)
    stats = {"seed": config.corpus_seed, "sources": sources, "documents": sum(s["kept"] for s in sources)}
    stats_path.write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats
