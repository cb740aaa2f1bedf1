"""The quickstart's settings and what they decide: :class:`QuickstartConfig`, and its :class:`QuickstartPlan` (the
documents, how mining reads them and each stage's fingerprint), worked out once. Below the stages
(:mod:`xprt_st.quickstart.stages`) and the run (:mod:`xprt_st.quickstart.run`), which both read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xprt_st.errors import XPRTError
from xprt_st.fingerprint import corpus_identity, recipe_values
from xprt_st.precision import resolve_precision
from xprt_st.quickstart.defaults import DEFAULTS, HOLDOUT

__all__ = [
    "HYBRID_START",
    "HYBRID_TRAINED",
    "MINED",
    "MODEL",
    "PACKAGED_DATA",
    "QUICKSTART_CORPUS",
    "QuickstartConfig",
    "QuickstartInputError",
    "QuickstartPlan",
]

PACKAGED_DATA = Path(__file__).resolve().parents[1] / "data"
QUICKSTART_CORPUS = PACKAGED_DATA / "python-docs-pages.jsonl.gz"
"""The shipped corpus: 100 pages of the Python documentation as raw HTML."""
MINED, MODEL = "mined", "model"
"""The quickstart's two stages with a fingerprint, by the folder each writes."""
HYBRID_START, HYBRID_TRAINED = "hybrid:start", "hybrid:trained"
"""The labels of BM25 fused with the start and with the trained model in the quickstart's evaluation."""


class QuickstartInputError(XPRTError, ValueError):
    """A user corpus or task given to the quickstart cannot be used; the message names the option and the file."""


@dataclass
class QuickstartConfig:
    """Settings of the quickstart; the defaults finish within 10 minutes on 2 CPU cores."""

    output: Path = Path("xprt-quickstart")
    """Run folder: ``mined/``, ``model/``, ``evaluation/`` and ``summary.json`` go here."""
    model: str | None = None
    """Starting and mining model; None is the offline default (all-MiniLM-L6-v2)."""
    recipe: str = DEFAULTS.recipe
    threshold_quantile: float | None = DEFAULTS.threshold_quantile
    max_steps: int | None = None
    """Training steps; None: ``DEFAULTS.max_steps`` on the shipped pages, and with ``corpus``
    :func:`~xprt_st.quickstart.defaults.corpus_steps` of the mined groups (``DEFAULTS.corpus_max_steps``, at most
    one pass), set once mining has counted them."""
    batch_size: int = DEFAULTS.batch_size
    learning_rate: float = DEFAULTS.learning_rate
    max_seq_length: int = DEFAULTS.max_seq_length
    tasks: tuple[str, ...] = ("python-faq",)
    """The labelled tasks scored: the shipped run's; with ``task`` that folder alone, with ``corpus`` and no
    ``task`` none (resolved when the config is made, so ``summary.json`` names what was scored)."""
    seed: int = 42
    holdout: float = HOLDOUT
    """Fraction of whole pages held out of training for the label-free check (0: no check)."""
    max_documents: int | None = None
    """Mine only the first N shipped pages (for tests and quick looks); None mines all 100."""
    corpus: tuple[str, ...] = ()
    """The user's documents (what ``xprt-st mine`` reads); empty: the shipped pages."""
    task: Path | None = None
    """With ``corpus``: the user's labelled BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)."""
    text_field: str | None = None
    """With ``corpus``: the field with the text (``xprt-st mine --text-field``)."""
    id_field: str | None = None
    """With ``corpus``: the field with the document id, which the held-out draw hashes."""
    title_field: str | None = None
    """With ``corpus``: the field with the title, where ``xprt-st mine`` supports one."""
    html: bool = False
    """With ``corpus``: the text is raw HTML (extracted with trafilatura)."""
    encode_backend: str = "torch"
    """What runs the models in the stages that only encode (mining, hard negatives, every evaluation; training
    is torch's): torch, onnx or openvino (:mod:`xprt_st.encode_backend`); the exports go to ``mined/.onnx-cache``."""
    precision: str = "auto"
    """auto, fp32 or bf16 of training and of torch's encodings (:mod:`xprt_st.precision`), resolved when the config
    is made (auto: bf16 where the device computes it natively), so ``summary.json`` and the stages' fingerprints name
    what ran; a non-torch ``encode_backend`` encodes in fp32 (:attr:`encoding_precision`)."""
    precision_reason: str = ""
    """Why ``precision`` is what it is (the device's bf16 support, or the value asked for); set with it."""
    encoding_precision: str = field(init=False, default="fp32")
    """The precision of the stages that only encode: :attr:`precision` on torch, fp32 on ONNX Runtime or OpenVINO
    (their exports run fp32); set with :attr:`precision`."""

    def __post_init__(self) -> None:
        if not self.precision_reason:  # a copy (dataclasses.replace) keeps the resolution it was made with
            resolved = resolve_precision(self.precision)
            self.precision, self.precision_reason = resolved.precision, resolved.reason
        self.encoding_precision = self.precision if self.encode_backend == "torch" else "fp32"
        if self.max_steps is None and not self.corpus:
            self.max_steps = DEFAULTS.max_steps
        if self.task is not None:
            self.tasks = (str(self.task),)
        elif self.corpus:
            self.tasks = ()

    def plan(self) -> QuickstartPlan:
        """What a run of these settings does, worked out once: its documents, how mining reads them
        (:meth:`mining_fields`) and each stage's fingerprint (:meth:`mining_fingerprint`,
        :meth:`training_fingerprint`)."""
        sources: list[str | Path] = list(self.corpus) if self.corpus else [QUICKSTART_CORPUS]
        fields = self.mining_fields()
        fingerprints = {MINED: self.mining_fingerprint(sources, fields), MODEL: self.training_fingerprint()}
        return QuickstartPlan(self, sources, fields, fingerprints)

    def mining_fingerprint(self, sources: list[str | Path], mining_fields: dict[str, Any]) -> dict[str, Any]:
        """What decides ``mined/``: the corpus (files and sizes, or the shipped pages and how many), how it is read
        (``mining_fields``: :meth:`mining_fields`), the mining model, the held-out fraction and the seed that draws
        it, the threshold, the token limit and the precision (resolved: a bf16 mining is not an fp32 one)."""
        return {
            "corpus": corpus_identity(sources),
            "max_documents": self.max_documents,
            **mining_fields,
            "model": self.model,
            "holdout": self.holdout,
            "seed": self.seed,
            "threshold_quantile": self.threshold_quantile,
            "max_seq_length": self.max_seq_length,
            "precision": self.encoding_precision,
        }

    def training_fingerprint(self) -> dict[str, Any]:
        """What decides ``model/`` beside its data: the recipe (its name and its file's values, not where the file
        lives), the steps as given (None: the default of the mined groups, themselves fixed by ``mined/``), batch,
        learning rate, token limit, seed, starting model and precision."""
        from xprt_st.recipe import load_recipe

        return {
            "recipe": self.recipe,
            "recipe_values": recipe_values(load_recipe(self.recipe).to_dict()),
            "max_steps": self.max_steps,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "max_seq_length": self.max_seq_length,
            "seed": self.seed,
            "model": self.model,
            "precision": self.precision,
        }

    def mining_fields(self) -> dict[str, Any]:
        """The reading options of ``mine`` for the user's corpus (the shipped pages: HTML with an ``id``), and what
        the recipe's data asks of the mining when it is not the default (:func:`recipe_mining`):
        ``lexical-positive-hard`` mines with ``rank_by: bm25``, ``inverse-cloze-hard`` with ``pairs: inverse-cloze``."""
        asked = recipe_mining(self.recipe)
        if not self.corpus:
            # the held-out draw hashes the page id, not the install path
            return {"html": True, "id_field": "id", **asked}
        fields: dict[str, Any] = {"html": self.html, "text_field": self.text_field, "id_field": self.id_field}
        if self.title_field is not None:
            fields["title_field"] = self.title_field
        return fields | asked


@dataclass(frozen=True)
class QuickstartPlan:
    """What a run does, worked out once before any work (:meth:`QuickstartConfig.plan`): its documents, how mining
    reads them, and the fingerprint of each stage it records (and a rerun compares)."""

    config: QuickstartConfig
    sources: list[str | Path]
    """The documents mined, as given: the user's corpus, or the shipped pages."""
    mining_fields: dict[str, Any]
    """:meth:`QuickstartConfig.mining_fields`."""
    fingerprints: dict[str, dict[str, Any]]
    """Each stage's fingerprint (:data:`MINED`, :data:`MODEL`)."""


def recipe_mining(recipe: str) -> dict[str, str]:
    """The mining settings ``recipe``'s data requires beyond the paper's: ``rank_by`` other than fused, ``pairs``
    inverse-cloze; ``{}`` for the others (so the mining fingerprint of a run with any other recipe is what it was
    before rankings were asked for)."""
    from xprt_st.recipe import load_recipe

    requires = load_recipe(recipe).data.requires
    asked = {}
    if requires.get("rank_by") not in (None, "fused"):
        asked["rank_by"] = str(requires["rank_by"])
    if requires.get("pairs") == "inverse-cloze":  # a merge setting on the mined anchors, so the quickstart can mine it
        asked["pairs"] = "inverse-cloze"
    return asked
