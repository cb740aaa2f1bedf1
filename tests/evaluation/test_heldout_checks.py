"""The one runner of held-out checks: each model loaded and its passages encoded once for every check, each check
scored and compared as its declaration says, and a folder without what a check reads left out, not refused."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from tests.heldout_helpers import start_and_moved, write_heldout
from xprt_st.evaluation import heldout_vectors
from xprt_st.evaluation.heldout_checks import CheckSkipped, HeldoutCheck, run_heldout_checks
from xprt_st.evaluation.label_free import LABEL_FREE_CHECK, load_heldout_task, score_embeddings


def _models(tmp_path: Path, tiny_model: SentenceTransformer) -> dict[str, Path]:
    start, trained = start_and_moved(tiny_model, tmp_path / "start", tmp_path / "trained")
    return {"start": start, "trained": trained}


def test_each_model_is_loaded_and_encoded_once_for_every_check(tmp_path: Path, tiny_model, monkeypatch) -> None:
    texts = {label: [f"page {label} part {i} about item {label * 7 + i}" for i in range(4)] for label in range(3)}
    mined = write_heldout(tmp_path / "mined", texts, [(0, 0, [1, 2]), (1, 3, [2, 1]), (2, 1, [0, 2])])
    models = _models(tmp_path, tiny_model)
    heldout_vectors.forget()
    loads: Counter[str] = Counter()
    encoded: Counter[int] = Counter()

    def load(model: Path | str | None) -> SentenceTransformer:
        loads[str(model)] += 1
        loaded = SentenceTransformer(str(model))
        original = loaded.encode

        def encode(sentences, *args, **kwargs):
            encoded[id(loaded)] += len(sentences)
            return original(sentences, *args, **kwargs)

        monkeypatch.setattr(loaded, "encode", encode)
        return loaded

    twice = replace(LABEL_FREE_CHECK, name="again")  # a second check reading the same passages
    results = run_heldout_checks(mined, [LABEL_FREE_CHECK, twice], models, load)

    assert loads == Counter({str(models["start"]): 1, str(models["trained"]): 1})
    assert sorted(encoded.values()) == [12, 12]  # 3 documents x 4 passages, once per model for both checks
    heldout = load_heldout_task(mined)
    by_hand = {
        role: score_embeddings(heldout, SentenceTransformer(str(path)).encode(heldout.texts))
        for role, path in models.items()
    }
    record = results["label_free"]
    assert record == results["again"]
    assert record["start"] == pytest.approx(np.mean(list(by_hand["start"].values())), abs=1e-6)
    assert record["model"] == pytest.approx(np.mean(list(by_hand["trained"].values())), abs=1e-6)
    assert {"difference", "ci_low", "ci_high", "verdict", "knn_overlap_at_10"} <= set(record)


def test_a_stored_record_skips_the_scoring_and_a_folder_without_the_part_gives_none(tmp_path: Path) -> None:
    def never(model: Path | str | None) -> SentenceTransformer:
        raise AssertionError(f"{model} was loaded")

    def refuse(task: object, start: object, model: object) -> dict:
        raise AssertionError("scored")

    stored = {"start": 0.5, "model": 0.6}
    read = HeldoutCheck("read", "read", lambda folder: object(), refuse, refuse, stored=lambda task, model: stored)
    missing = HeldoutCheck("missing", "missing", lambda folder: None, refuse, refuse)

    def too_small(folder: Path) -> object:
        raise CheckSkipped({"queries": 1, "skipped": "1 anchor"})

    small = HeldoutCheck("small", "small", too_small, refuse, refuse)
    results = run_heldout_checks(tmp_path, [read, missing, small], {"start": "a", "trained": "b"}, never)
    assert results == {"read": stored, "missing": None, "small": {"queries": 1, "skipped": "1 anchor"}}
