"""Helpers for the training tests: a tiny mined folder and a toy loss that owns a module."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformerTrainingArguments
from torch import Tensor, nn

TEXT_COLUMNS = ("anchor", "positive", "related_2", "related_3", "related_4")
DOCUMENTS = [
    (
        "baseball",
        [
            "A perfect game means no batter reaches base.",
            "The pitcher retired all twenty-seven batters.",
            "Only a few perfect games were thrown in the major leagues.",
            "Umpires confirm each out.",
            "The catcher called every pitch of the game.",
        ],
    ),
    (
        "carbon",
        [
            "Carbon capture stores emissions underground.",
            "The policy report reviews storage sites.",
            "Capture plants need large amounts of energy.",
            "Pipelines carry the gas to the wells.",
            "Regulators monitor the wells for leaks.",
        ],
    ),
    (
        "trucks",
        [
            "The F-Series pickup is sold in North America.",
            "Each generation changed the frame and engine.",
            "The truck comes in several cab sizes.",
            "Towing capacity grew with every model year.",
            "Fleet buyers choose the heavy duty version.",
        ],
    ),
    (
        "bread",
        [
            "Sourdough rises with wild yeast.",
            "A starter is fed flour and water every day.",
            "Long fermentation gives the bread its sour taste.",
            "Bakers score the loaf before baking.",
            "A hot oven gives the crust its color.",
        ],
    ),
]


def make_groups(n_groups: int = 16) -> dict[str, list]:
    """Groups in the mined column layout; several groups share a document id (label)."""
    rows: dict[str, list] = {column: [] for column in (*TEXT_COLUMNS, "label")}
    for index in range(n_groups):
        doc_id = index % len(DOCUMENTS)
        passages = DOCUMENTS[doc_id][1]
        shift = index // len(DOCUMENTS)
        ordered = passages[shift % 5 :] + passages[: shift % 5]
        for column, text in zip(TEXT_COLUMNS, ordered, strict=True):
            rows[column].append(f"{text} ({index})")
        rows["label"].append(doc_id)
    return rows


def write_mined(
    folder: Path, n_groups: int = 16, stats: dict | None = None, negatives: int = 0, lexical: int = 0
) -> Path:
    """Save a mined folder (datasets.save_to_disk + stats.json) like ``xprt-st mine`` does.

    With ``negatives`` K, the groups also get ``negative_1..K``: passages of other documents, as
    ``xprt-st mine --hard-negatives K`` writes them; with ``lexical`` L, ``lexical_1..L`` (other documents' second
    passages), as ``--lexical-candidates L`` does.
    """
    from datasets import Dataset, Features, Value

    groups = make_groups(n_groups)
    for k in range(1, negatives + 1):
        groups[f"negative_{k}"] = [
            f"{DOCUMENTS[(label + k) % len(DOCUMENTS)][1][0]} ({index})" for index, label in enumerate(groups["label"])
        ]
    for k in range(1, lexical + 1):
        groups[f"lexical_{k}"] = [
            f"{DOCUMENTS[(label + k) % len(DOCUMENTS)][1][-1]} [{index}]" for index, label in enumerate(groups["label"])
        ]
    features = Features({name: Value("string") for name in groups if name != "label"})
    features["label"] = Value("int64")
    Dataset.from_dict(groups, features=features).save_to_disk(str(folder))
    base = {
        "documents": len(DOCUMENTS),
        "groups": n_groups,
        "groups_per_document": n_groups / len(DOCUMENTS),
        "settings": {"positive": "mined", "pairs": "mined", "seed": 0},
    }
    (folder / "stats.json").write_text(json.dumps({**base, **(stats or {})}), encoding="utf-8")
    return folder


class ToyProjectionLoss(nn.Module):
    """In-batch InfoNCE on a loss-owned projection, plus a scheduled ``retention_weight`` term.

    Stands in for the xPRT losses: it keeps the model at ``model``, owns ``projection`` (like the
    decoder's conditioning projection) and exposes a plain float ``retention_weight``.
    """

    def __init__(self, model: nn.Module, retention_weight: float = 40.0, nan_at_call: int | None = None) -> None:
        super().__init__()
        self.model = model
        dim = model.get_embedding_dimension()
        self.projection = nn.Linear(dim, dim)
        self.retention_weight = retention_weight
        self.nan_at_call = nan_at_call
        self.calls = 0

    def forward(self, sentence_features: list[dict[str, Tensor]], labels: Tensor) -> dict[str, Tensor]:
        self.calls += 1
        anchors = self.projection(self.model(sentence_features[0])["sentence_embedding"])
        positives = self.model(sentence_features[1])["sentence_embedding"]
        scores = nn.functional.normalize(anchors, dim=-1) @ nn.functional.normalize(positives, dim=-1).T / 0.05
        same_doc = labels[:, None] == labels[None, :]
        scores = scores.masked_fill(same_doc & ~torch.eye(len(labels), dtype=torch.bool), float("-inf"))
        xp = nn.functional.cross_entropy(scores, torch.arange(len(labels)))
        reg = self.retention_weight * 1e-3 * anchors.pow(2).mean()
        if self.nan_at_call is not None and self.calls >= self.nan_at_call:
            xp = xp * float("nan")
        return {"xp": xp, "retention": reg}

    def get_config_dict(self) -> dict[str, float]:
        return {"retention_weight": self.retention_weight}

    @property
    def citation(self) -> str:
        return "@misc{toy, title={Toy loss}}"


def cpu_training_args(output: Path, **overrides) -> SentenceTransformerTrainingArguments:
    """Small deterministic CPU training arguments (seed 7, equal batches, no reports or bars); ``overrides`` win."""
    values = dict(
        output_dir=str(output),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        save_steps=2,
        logging_steps=1,
        seed=7,
        report_to=[],
        dataloader_drop_last=True,
        use_cpu=True,
        disable_tqdm=True,
    )
    values.update(overrides)
    return SentenceTransformerTrainingArguments(**values)
