"""Build the small corpus and retrieval task that ship with the package for ``xprt-st quickstart``.

Source: Debian 12's ``python3.11-doc`` package (the Python 3.11 documentation, PSF license), taken
straight from the Debian archive, not from the benchmark data beside the checkout::

    apt-get download python3.11-doc && dpkg -x python3.11-doc_*.deb /tmp/python-doc
    python scripts/build_quickstart_data.py /tmp/python-doc/usr/share/doc/python3.11/html

With ``--all-pages FILE`` it writes instead every page of the package but the FAQ's (521 of its 530 HTML pages,
no size cap, the same fields) to ``FILE``: the technical-documentation domain of the in-domain comparison
(``benchmarks/compare-in-domain-python-docs.yaml``), scored on the shipped ``python-faq``::

    python scripts/build_quickstart_data.py /tmp/python-doc/usr/share/doc/python3.11/html \
        --all-pages runs/python-docs/pages.jsonl.gz

Otherwise it writes ``xprt_st/data/``:

- ``python-docs-pages.jsonl.gz``: raw HTML pages (``id``, ``url``, ``html``) of the tutorial, the
  how-tos and part of the library reference: real pages with navigation bars, search boxes and
  copyright footers, the material xPRT's anchor filter exists to keep out. The FAQ is left out.
- ``python-faq/``: a BEIR-format retrieval task built from the FAQ pages: each question heading is
  a query and the body of its section is the one relevant document. No page of the FAQ is in the
  pre-training corpus, so the task measures transfer, not memorisation.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import lxml.html

MAX_PAGE_BYTES = 60_000
MAX_PAGES = 100
SECTIONS = ("tutorial", "howto", "library", "reference", "using", "extending")


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("¶", "")).strip()


def _pages(root: Path) -> list[dict[str, str]]:
    pages = []
    for section in SECTIONS:
        for path in sorted((root / section).glob("*.html")):
            html = path.read_text(encoding="utf-8")
            if len(html.encode()) > MAX_PAGE_BYTES or path.name in {"index.html"}:
                continue
            page_id = f"python3.11/html/{section}/{path.name}"
            pages.append({"id": page_id, "url": f"https://docs.python.org/3.11/{section}/{path.name}", "html": html})
    # Interleave sections so that any prefix of the file is a varied sample.
    by_section: dict[str, list[dict[str, str]]] = {}
    for page in pages:
        by_section.setdefault(page["id"].split("/")[2], []).append(page)
    interleaved = []
    while any(by_section.values()) and len(interleaved) < MAX_PAGES:
        for section in SECTIONS:
            if by_section.get(section):
                interleaved.append(by_section[section].pop(0))
    return interleaved[:MAX_PAGES]


def _all_pages(root: Path) -> list[dict[str, str]]:
    """Every HTML page under ``root`` but the FAQ's, in path order, with the fields of :func:`_pages`."""
    pages = []
    for path in sorted(root.rglob("*.html")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("faq/"):
            continue
        html = path.read_text(encoding="utf-8", errors="replace")
        pages.append(
            {"id": f"python3.11/html/{relative}", "url": f"https://docs.python.org/3.11/{relative}", "html": html}
        )
    return pages


def _faq(root: Path) -> tuple[list[dict[str, str]], list[dict[str, str]], list[tuple[str, str]]]:
    corpus, queries, qrels = [], [], []
    for path in sorted((root / "faq").glob("*.html")):
        if path.name == "index.html":
            continue
        tree = lxml.html.fromstring(path.read_text(encoding="utf-8"))
        for section in tree.xpath("//section[not(.//section)]"):
            heading = section.xpath("./h1|./h2|./h3|./h4")
            if not heading:
                continue
            question = _clean(heading[0].text_content())
            heading[0].getparent().remove(heading[0])
            answer = _clean(section.text_content())
            if not question.endswith("?") or len(answer.split()) < 8:
                continue
            key = f"{path.stem}-{section.get('id')}"
            corpus.append({"_id": f"d-{key}", "title": "", "text": answer})
            queries.append({"_id": f"q-{key}", "text": question})
            qrels.append((f"q-{key}", f"d-{key}"))
    return corpus, queries, qrels


def _write_jsonl_gz(path: Path, rows: list[dict[str, str]]) -> None:
    with gzip.GzipFile(path, "wb", mtime=0) as handle:
        for row in rows:
            handle.write((json.dumps(row, ensure_ascii=False) + "\n").encode())


def main(html_root: str) -> None:
    root = Path(html_root)
    out = Path(__file__).resolve().parents[1] / "xprt_st" / "data"
    (out / "python-faq" / "qrels").mkdir(parents=True, exist_ok=True)
    pages = _pages(root)
    _write_jsonl_gz(out / "python-docs-pages.jsonl.gz", pages)
    corpus, queries, qrels = _faq(root)
    _write_jsonl_gz(out / "python-faq" / "corpus.jsonl.gz", corpus)
    _write_jsonl_gz(out / "python-faq" / "queries.jsonl.gz", queries)
    lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t1" for q, d in qrels)]
    (out / "python-faq" / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    print(f"{len(pages)} pages; FAQ task: {len(queries)} queries, {len(corpus)} documents")


def main_all_pages(html_root: str, output: str) -> None:
    pages = _all_pages(Path(html_root))
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    _write_jsonl_gz(Path(output), pages)
    print(f"{len(pages)} pages (the FAQ's left out) -> {output}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--all-pages":
        main_all_pages(sys.argv[1], sys.argv[3])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: build_quickstart_data.py HTML_ROOT [--all-pages FILE]")
