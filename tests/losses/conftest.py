"""Fixtures for the loss tests: a tiny mined batch (anchor, 4 related, document ids) tokenized for a model."""

from __future__ import annotations

import pytest
import torch

GROUPS = {
    "anchor": [
        "a perfect game is a game in which no batter reaches base",
        "the ford f series is a line of pickup trucks",
        "carbon capture stores carbon dioxide underground",
        "pitchers throw fast balls and curve balls",
    ],
    "positive": [
        "only a few perfect games have been thrown in the major leagues",
        "the f one fifty is the best selling truck of the line",
        "the captured gas is pressed into deep rock layers",
        "a curve ball spins so that it drops late",
    ],
    "related_2": [
        "the pitcher retired every batter he faced",
        "ford sells the trucks across north america",
        "storage sites are checked for leaks over many years",
        "the fast ball is the most common pitch",
    ],
    "related_3": [
        "no walks no hits and no errors were allowed",
        "the first model of the series came out long ago",
        "power plants can add capture units to their stacks",
        "some pitchers also throw a slider",
    ],
    "related_4": [
        "the crowd stood for the final out",
        "the trucks come with gas or diesel engines",
        "the cost of capture is still high",
        "catchers signal which pitch to throw",
    ],
    # groups 0 and 3 come from the same baseball page
    "label": [7, 8, 9, 7],
}
COLUMNS = ("anchor", "positive", "related_2", "related_3", "related_4")


def tokenize(model, texts: list[str]) -> dict[str, torch.Tensor]:
    return dict(model.preprocess(texts))


@pytest.fixture
def group_batch():
    """Return ``make(model, groups=4)`` -> (features for the 5 columns, int64 labels)."""

    def make(model, groups: int = 4):
        features = [tokenize(model, GROUPS[column][:groups]) for column in COLUMNS]
        labels = torch.tensor(GROUPS["label"][:groups], dtype=torch.long)
        return features, labels

    return make


@pytest.fixture
def group_dataset():
    """A tiny ``datasets.Dataset`` with the mined columns (the trainer tests use it)."""
    from datasets import Dataset

    rows = {column: list(GROUPS[column]) * 2 for column in COLUMNS}
    rows["label"] = [label for label in GROUPS["label"]] + [label + 100 for label in GROUPS["label"]]
    return Dataset.from_dict(rows)
