"""Pre-train the small BERT that the from-BERT comparison starts from (benchmarks/compare-from-bert-cpu.yaml).

Run:  python benchmarks/pretrain_small_bert.py --output runs/small-bert [--steps 600] [--layers 4] [--hidden 256]

Corpus: every BBC article and the main text of every Debian HTML page under ../shared/data (or
$XPRT_DATA_DIR), the same sources the comparison mines. The pre-training itself is
:func:`xprt_st.training.pretrain_mlm.pretrain_small_bert`; its record lands in ``OUTPUT/pretraining.json``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import fields

from xprt_st.evaluation.catalog import default_data_dir
from xprt_st.mining import extract_main_text, iter_corpus
from xprt_st.training.pretrain_mlm import SmallBertConfig, pretrain_small_bert

SOURCES = (("bbc-news/bbc-fulltext.zip", False), ("debian-docs-html/pages.jsonl.gz", True))


def corpus_texts(max_documents: int | None) -> list[str]:
    """The documents' texts (HTML reduced to its main text), at most ``max_documents`` per source."""
    data = default_data_dir()
    texts: list[str] = []
    for relative, html in SOURCES:
        path = data / relative
        if not path.is_file():
            sys.exit(f"{path} is missing: the pre-training corpus lives in ../shared/data (or $XPRT_DATA_DIR)")
        records = iter_corpus([path], text_field="html" if html else "text")
        for count, record in enumerate(records):
            if max_documents is not None and count >= max_documents:
                break
            text = extract_main_text(record.text, record.origin) if html else record.text
            if text:
                texts.append(text)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="new folder for the checkpoint")
    parser.add_argument("--max-documents", type=int, default=None, help="per source; all when omitted")
    parser.add_argument("--device", default=None)
    for item in fields(SmallBertConfig):
        parser.add_argument(f"--{item.name.replace('_', '-')}", type=type(item.default), default=item.default)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = SmallBertConfig(**{item.name: getattr(args, item.name) for item in fields(SmallBertConfig)})
    texts = corpus_texts(args.max_documents)
    logging.getLogger(__name__).info("pre-training corpus: %d documents", len(texts))
    record = pretrain_small_bert(texts, args.output, config, device=args.device)
    print(record)


if __name__ == "__main__":
    main()
