"""Every recipe of one comparison computes the retention term on the same text (issue #19.4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from xprt_st.compare import COMPARISON_RECIPES, data_variant, prepare_variant
from xprt_st.mining import GroupBuilder, MiningConfig
from xprt_st.recipe import load_recipe
from xprt_st.training import train_recipe
from xprt_st.training.data import MinedDataError
from xprt_st.training.fork import ForkTrainer
from xprt_st.training.trainer import XPRTTrainer

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery"]


def _corpus(path: Path, documents: int = 8) -> Path:
    rows = []
    for i in range(documents):
        topic = TOPICS[i % len(TOPICS)]
        paragraphs = [
            f"The {topic} story part {j} of document {i} mentions {topic} facts and {topic} history, "
            f"with detail number {i * 10 + j} about {TOPICS[(i + j) % len(TOPICS)]}."
            for j in range(4 + i % 3)
        ]
        rows.append(json.dumps({"text": "\n\n".join(paragraphs), "id": f"doc-{i}"}))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


class _Built(Exception):
    """Raised instead of training: the test only needs the loss and dataset train_recipe built."""


def _capture(monkeypatch) -> list:
    built = []

    def record(self, *args, **kwargs):
        built.append((self.loss, self.train_dataset))
        raise _Built

    monkeypatch.setattr(XPRTTrainer, "train", record)
    monkeypatch.setattr(ForkTrainer, "train", record)
    return built


def test_every_recipe_of_a_comparison_gets_the_same_retention_term(tiny_model_path, tiny_model, tmp_path, monkeypatch):
    config = MiningConfig(max_tokens=32, min_tokens=8, batch_size=16, threshold_quantile=0.5, id_field="id")
    mined = tmp_path / "mined"
    GroupBuilder([_corpus(tmp_path / "corpus.jsonl")], mined, config, model=tiny_model, progress=False).run()
    built = _capture(monkeypatch)
    overrides = {"training.model": str(tiny_model_path), "training.batch_size": 2, "training.max_steps": 1}
    for name in COMPARISON_RECIPES:
        recipe = load_recipe(name, overrides=overrides)  # the continued setting: retention on
        variant, options = data_variant(recipe.data.requires)
        data = mined if variant == "mined" else tmp_path / variant
        if variant != "mined" and not (data / "stats.json").is_file():
            prepare_variant(mined, data, options, 0, progress=False)
        with pytest.raises(_Built):
            train_recipe(recipe, data, tmp_path / f"run-{name}", progress=False, retention_data=mined)
    values = {}
    for name, (loss, dataset) in zip(COMPARISON_RECIPES, built, strict=True):
        model = loss.model
        torch.manual_seed(0)
        with torch.no_grad():  # identical weights, then the same perturbation of every student
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        loss.eval()
        rows = dataset.select(range(4))
        features = [dict(model.preprocess(rows[column])) for column in dataset.column_names if column != "label"]
        labels = torch.tensor(rows["label"])
        torch.manual_seed(1)
        values[name] = float(loss(features, labels)["retention"])
    reference = values["xprt"]
    assert reference > 0  # the perturbation moved the student away from the teacher
    for name, value in values.items():
        assert value == pytest.approx(reference, rel=1e-5), (name, values)


def test_retention_text_from_other_groups_is_refused(tiny_model_path, tmp_path):
    from training_helpers import write_mined

    data = write_mined(tmp_path / "data", n_groups=8)
    other = write_mined(tmp_path / "other", n_groups=6)
    recipe = load_recipe(
        "change-only-positive", overrides={"training.model": str(tiny_model_path), "training.batch_size": 2}
    )
    with pytest.raises(MinedDataError, match="not the training data's 8 groups"):
        train_recipe(recipe, data, tmp_path / "run", progress=False, retention_data=other)
