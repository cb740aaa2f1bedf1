"""The registry of model kinds: a kind a team registers is scored like ``bm25``, by name, beside dense models."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from xprt_st.evaluation.lexical import BM25, HYBRID_PREFIX, LexicalSpecError, check_lexical_spec, parse_lexical_spec
from xprt_st.evaluation.model_kinds import MODEL_KINDS, ModelKind, ModelKindError, find_model_kind, register_model_kind
from xprt_st.evaluation.run import evaluate_models

CORPUS = {
    "dog": {"title": "Dogs", "text": "Dogs need a long walk every morning."},
    "tea": {"title": "Tea", "text": "Green tea leaves are steeped in water."},
    "bread": {"title": "Baking", "text": "Bread dough rises while yeast ferments."},
}
QUERIES = {"q-dog": "walks", "q-tea": "steeping", "q-bread": "dough"}
QRELS = [("q-dog", "dog", 1), ("q-tea", "tea", 1), ("q-bread", "bread", 1)]
ORDER = ["tea", "bread", "dog"]
"""What the registered kind returns for every query, best first."""


class FixedOrder:
    """A search model in mteb's protocol that ranks every corpus the same way, whatever the query."""

    def __init__(self) -> None:
        from mteb.models.model_meta import ModelMeta

        self.mteb_model_meta = ModelMeta.create_empty(overwrites={"name": "test/fixed-order", "revision": "1"})

    def index(self, corpus: Any, **kwargs: Any) -> None:
        self.ids = list(corpus["id"])

    def search(self, queries: Any, *, top_k: int, **kwargs: Any) -> dict[str, dict[str, float]]:
        return {query: {doc: float(len(ORDER) - rank) for rank, doc in enumerate(ORDER)} for query in queries["id"]}


@pytest.fixture
def fixed_order_kind():
    kind = register_model_kind(ModelKind("fixed-order", "every query gets tea, bread, dog", search=FixedOrder))
    yield kind
    del MODEL_KINDS[kind.name]


def test_a_registered_kind_is_evaluated_by_name_with_per_query_scores(
    fixed_order_kind: ModelKind, beir_writer, tmp_path: Path
) -> None:
    folder = beir_writer(tmp_path / "kinds", CORPUS, QUERIES, QRELS)
    report = evaluate_models(["fixed-order"], [str(folder)])
    # nDCG@10 of one relevant document at rank r is 1 / log2(r + 1)
    expected = {"q-tea": 1.0, "q-bread": 1 / math.log2(3), "q-dog": 1 / math.log2(4)}
    got = report.per_query["kinds"]["fixed-order"]
    assert got.keys() == expected.keys()
    assert all(math.isclose(got[query], value, rel_tol=1e-6) for query, value in expected.items())
    assert report.scores[0].model_key == "test/fixed-order@1"
    assert parse_lexical_spec("fixed-order").kind == "fixed-order"


def test_the_shipped_kinds_and_a_taken_spelling() -> None:
    assert find_model_kind(BM25) == (MODEL_KINDS["bm25"], None)
    assert find_model_kind(f"{HYBRID_PREFIX}runs/model") == (MODEL_KINDS["hybrid"], "runs/model")
    assert find_model_kind("runs/model") is None and find_model_kind(None) is None
    with pytest.raises(ModelKindError, match="'hybrid:MODEL' is 'hybrid'"):
        register_model_kind(ModelKind("other-hybrid", "a second hybrid", search=FixedOrder, prefix=HYBRID_PREFIX))
    with pytest.raises(LexicalSpecError, match="the model after 'hybrid:' must be a dense model"):
        check_lexical_spec("hybrid:bm25")
