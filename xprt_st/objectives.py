"""Objectives by name: what a recipe's ``objective.name`` builds and which mined columns it reads.

Each objective turns ``(model, teacher, args)`` into a loss for :class:`~xprt_st.training.XPRTTrainer`
and names the dataset columns fed to it, in order. With retention on, the loss is wrapped in
:class:`~xprt_st.losses.WithRetention` (its first two columns are always ``anchor`` and ``positive``, so
every method gets the same retention term); within-passage baselines then read their own columns
through :class:`ColumnSelect`.

Register another objective with :func:`register_objective`.

This registry sits below both its readers: the recipe loader validates ``objective.*`` against it
(:func:`check_objective`) without importing the training package, and the trainer builds the loss from
it (:func:`build_loss`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import random
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.columns import ANCHOR, GROUP_COLUMNS, POSITIVE, lexical_columns, negative_columns
from xprt_st.errors import XPRTError

logger = logging.getLogger(__name__)

DAMAGED = "damaged"
"""Column added for TSDAE: the anchor with words deleted."""


class ObjectiveUnavailableError(XPRTError, ImportError):
    """The loss an objective needs is not provided by this installation."""


@dataclass(frozen=True)
class Bound:
    """The accepted interval of a numeric loss argument, checked when a recipe is read (before any model loads).

    Example:
        >>> Bound(low=0).describe(), Bound(0, 1, high_open=True).describe(), Bound(0, low_open=True).contains(0)
        ('>= 0', 'in [0, 1)', False)
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the interval (never NaN, which every comparison lets through)."""
        if math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        """``>= 0``, ``> 0``, ``in (0, 1]`` ...: how a message states the accepted values."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


NON_NEGATIVE = Bound(low=0)
POSITIVE_NUMBER = Bound(low=0, low_open=True)
RATIO = Bound(0, 1, high_open=True)
"""``[0, 1)``: the fill-in losses' mask ratios."""
OPEN_RATIO = Bound(0, 1, low_open=True, high_open=True)
"""``(0, 1)``: a mask ratio that must mask something (MLM, RetroMAE)."""

XPRT_BOUNDS = {
    **dict.fromkeys(("xp_weight", "cross_weight", "self_weight", "mlm_weight", "unif_weight"), NON_NEGATIVE),
    "temperature": POSITIVE_NUMBER,
    "encoder_mask_ratio": RATIO,
    "decoder_mask_ratio": RATIO,
    "prediction_ratio": Bound(0, 1, low_open=True),
    "num_condition_vectors": Bound(low=1),
    "retention_temperature": POSITIVE_NUMBER,
    "uniformity_t": POSITIVE_NUMBER,
    **dict.fromkeys(("mini_batch_size", "decoder_mini_batch_size"), Bound(low=1)),  # issue 28; None: uncut
}
"""XPRTLoss's arguments: the checks its terms make when built, plus ``num_condition_vectors >= 1`` (0 fails only
at the first fill-in step) and ``retention_temperature > 0`` (the retention term divides by it, unchecked)."""


XPRT_WEIGHTS = {"xp_weight": 1.0, "cross_weight": 0.1, "self_weight": 0.1, "mlm_weight": 0.1, "unif_weight": 0.1}
"""XPRTLoss's term weights and their defaults."""


def _xprt_arg_problems(args: dict[str, Any]) -> list[str]:
    """XPRTLoss's rules across arguments: at least one term weight above 0 (else only retention would train, or
    nothing), and the MLM term and the self fill-in term (its teacher is read at the encoder's masked positions)
    need ``encoder_mask_ratio`` above 0 while their weight is; the others accept 0."""
    weights = {key: args.get(key, default) for key, default in XPRT_WEIGHTS.items()}
    if not any(value > 0 for value in weights.values()):
        return [
            f"objective.args: every term weight is 0 ({', '.join(weights)}), so the objective trains nothing (only "
            "the retention term would move the model); give at least one weight above 0"
        ]
    ratio = args.get("encoder_mask_ratio", 0.15)
    weights = {key: args.get(key, 0.1) for key in ("mlm_weight", "self_weight")}
    active = [f"{key} {value:g}" for key, value in weights.items() if value > 0]
    if ratio == 0 and active:
        return [
            f"objective.args.encoder_mask_ratio: 0 masks nothing, which the MLM and self fill-in terms need "
            f"({', '.join(active)}); give a value in (0, 1), or set mlm_weight and self_weight to 0"
        ]
    return []


@dataclass(frozen=True)
class Objective:
    """A named training objective.

    Attributes:
        name: the recipe's ``objective.name``.
        summary: one line for listings and the model card.
        loss_class: ``"module:Class"`` of the loss whose keyword arguments ``objective.args`` binds to.
        columns: dataset columns fed to the loss without retention, in order.
        retention_columns: columns with retention on (must start with anchor, positive).
        loss_positions: with retention, which of ``retention_columns`` the base loss reads (None: all).
        derived: columns made from the mined ones by ``prepare`` (not required in the mined folder).
        prepare: adds the derived columns, given the dataset and the seed.
        fixed_args: arguments the objective always passes (not settable from the recipe).
        native_retention: the loss builds its own retention term from ``teacher`` and ``retention_weight``
            arguments (XPRTLoss) instead of being wrapped in ``WithRetention``.
        vector_arg: the loss argument that picks which sentence vector it trains (RetroMAE's ``pooling``), whose
            value ``"model"`` means the model's own pooling, the vector that is served and evaluated.
        arg_bounds: accepted interval of each numeric argument, checked with the types of the loss's signature
            when the recipe is read (:func:`check_objective`), so a bad value never waits for a loaded model.
        arg_rules: problems across arguments (given the arguments after the type check).
    """

    name: str
    summary: str
    loss_class: str
    columns: tuple[str, ...]
    retention_columns: tuple[str, ...]
    loss_positions: tuple[int, ...] | None = None
    derived: tuple[str, ...] = ()
    prepare: Callable[[Dataset, int], Dataset] | None = None
    fixed_args: dict[str, Any] = field(default_factory=dict)
    native_retention: bool = False
    vector_arg: str | None = None
    arg_bounds: dict[str, Bound] = field(default_factory=dict)
    arg_rules: Callable[[dict[str, Any]], list[str]] | None = None
    extra_columns: Callable[[dict[str, Any]], tuple[str, ...]] | None = None
    """Columns an argument adds after the fixed ones (``hard_negatives: K`` adds ``negative_1 .. negative_K``);
    :meth:`with_args` appends them."""
    from_data: Callable[[Dataset, SentenceTransformer], dict[str, Any]] | None = None
    """Loss arguments counted from the training groups, given the model that will train on them (the hybrid
    teacher's BM25 statistics); never set from a recipe."""
    data_args: tuple[str, ...] = ()
    """The names of the arguments ``from_data`` gives."""

    def with_args(self, args: dict[str, Any] | None) -> Objective:
        """This objective with the columns its ``args`` add (itself when they add none)."""
        extra = self.extra_columns(args or {}) if self.extra_columns is not None else ()
        if not extra:
            return self
        return dataclasses.replace(
            self, columns=(*self.columns, *extra), retention_columns=(*self.retention_columns, *extra)
        )

    def dataset_columns(self, retention: bool) -> tuple[str, ...]:
        """The columns fed to the loss, in order, with retention on or off."""
        return self.retention_columns if retention else self.columns

    def mined_columns(self, retention: bool) -> tuple[str, ...]:
        """The columns the mined folder must provide."""
        return tuple(column for column in self.dataset_columns(retention) if column not in self.derived)

    def resolve_class(self) -> type[nn.Module]:
        """Import the loss class (:class:`ObjectiveUnavailableError` when this installation lacks it)."""
        module_name, _, class_name = self.loss_class.partition(":")
        try:
            module = __import__(module_name, fromlist=[class_name])
            return getattr(module, class_name)
        except (ImportError, AttributeError) as error:
            raise ObjectiveUnavailableError(
                f"objective {self.name!r} needs {module_name}.{class_name}, which this installation does not provide"
            ) from error

    def accepted_args(self) -> list[str] | None:
        """Keyword arguments the recipe may set; None when the loss takes ``**kwargs``."""
        parameters = inspect.signature(self.resolve_class().__init__).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return None
        reserved = {"self", "model", "teacher", "retention_weight", *self.fixed_args, *self.data_args}
        return [name for name in parameters if name not in reserved]


class ColumnSelect(nn.Module):
    """Feed a loss only some of the batch's columns (a within-passage baseline inside ``WithRetention``).

    ``loss`` stays a registered submodule, so its decoder is saved as loss-owned state and the model
    card finds it; ``model`` is a plain reference, as ``WithRetention`` expects.
    """

    def __init__(self, loss: nn.Module, positions: Iterable[int], model: SentenceTransformer) -> None:
        super().__init__()
        self.loss = loss
        self.positions = tuple(positions)
        object.__setattr__(self, "model", model)

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None
    ) -> Tensor | dict[str, Tensor]:
        """The inner loss on the selected columns only."""
        features = list(sentence_features)
        return self.loss([features[position] for position in self.positions], labels)

    def get_config_dict(self) -> dict[str, Any]:
        """What the model card records of this wrapper."""
        return {"positions": list(self.positions)}


def delete_words(text: str, ratio: float, rng: random.Random) -> str:
    """TSDAE noise: delete each word with probability ``ratio``; keep one word if all would go."""
    words = text.split()
    if not words:
        return text
    kept = [word for word in words if rng.random() >= ratio]
    return " ".join(kept) if kept else rng.choice(words)


def add_damaged_anchor(dataset: Dataset, seed: int, ratio: float = 0.6) -> Dataset:
    """Add the ``damaged`` column (anchor with 60% of its words deleted, TSDAE's default)."""
    rng = random.Random(seed)
    damaged = [delete_words(text, ratio, rng) for text in dataset[ANCHOR]]
    return dataset.add_column(DAMAGED, damaged)


def teacher_columns(args: dict[str, Any]) -> tuple[str, ...]:
    """The columns the hybrid teacher's ``hard_negatives: K`` and ``lexical_candidates: L`` add, in that order."""
    count = args.get("lexical_candidates", 0)
    lexical = lexical_columns(count) if isinstance(count, int) and count > 0 else ()
    return (*hard_negative_columns(args), *lexical)


def hard_negative_columns(args: dict[str, Any]) -> tuple[str, ...]:
    """The columns ``hard_negatives: K`` adds: ``negative_1 .. negative_K`` (none for 0 or a bad value)."""
    count = args.get("hard_negatives", 0)
    return negative_columns(count) if isinstance(count, int) and count > 0 else ()


OBJECTIVES: dict[str, Objective] = {}


def register_objective(objective: Objective) -> Objective:
    """Add (or replace) an objective so recipes can name it."""
    OBJECTIVES[objective.name] = objective
    return objective


register_objective(
    Objective(
        name="xprt",
        summary="xPRT: L_xp + 0.1 (L_cross + L_self + L_MLM + L_unif) (one batched encoder pass)",
        loss_class="xprt_st.losses:XPRTLoss",
        columns=GROUP_COLUMNS,
        retention_columns=GROUP_COLUMNS,
        native_retention=True,
        arg_bounds={**XPRT_BOUNDS, "hard_negatives": NON_NEGATIVE},
        arg_rules=_xprt_arg_problems,
        extra_columns=hard_negative_columns,
    )
)
register_objective(
    Objective(
        name="cross-passage",
        summary="L_xp only: symmetric InfoNCE, anchor vs its top related passage, same-document negatives masked",
        loss_class="xprt_st.losses:CrossPassageLoss",
        columns=(ANCHOR, POSITIVE),
        retention_columns=(ANCHOR, POSITIVE),
        arg_bounds={"temperature": POSITIVE_NUMBER, "hard_negatives": NON_NEGATIVE, "mini_batch_size": Bound(low=1)},
        extra_columns=hard_negative_columns,
    )
)
register_objective(
    Objective(
        name="self-only",
        summary="xPRT without cross-passage terms: self fill-in + MLM + uniformity on each group's own passages",
        loss_class="xprt_st.losses:XPRTLoss",
        columns=GROUP_COLUMNS,
        retention_columns=GROUP_COLUMNS,
        fixed_args={"xp_weight": 0.0, "cross_weight": 0.0},
        native_retention=True,
        arg_bounds=XPRT_BOUNDS,
        arg_rules=_xprt_arg_problems,
    )
)
register_objective(
    Objective(
        name="retromae",
        summary="RetroMAE with enhanced decoding on the anchor passage (within-passage baseline)",
        loss_class="xprt_st.losses:RetroMAELoss",
        columns=(ANCHOR,),
        retention_columns=(ANCHOR, POSITIVE),
        loss_positions=(0,),
        vector_arg="pooling",
        arg_bounds={"encoder_mask_ratio": OPEN_RATIO, "decoder_mask_ratio": OPEN_RATIO, "mlm_weight": NON_NEGATIVE},
    )
)
register_objective(
    Objective(
        name="tsdae",
        summary="TSDAE: sentence-transformers' DenoisingAutoEncoderLoss on the anchor passage",
        loss_class="sentence_transformers.sentence_transformer.losses:DenoisingAutoEncoderLoss",
        columns=(DAMAGED, ANCHOR),
        retention_columns=(ANCHOR, POSITIVE, DAMAGED),
        loss_positions=(2, 0),
        derived=(DAMAGED,),
        prepare=add_damaged_anchor,
    )
)


def _hybrid_teacher_data(dataset: Dataset, model: SentenceTransformer) -> dict[str, Any]:
    """The hybrid teacher's ``lexicon``: BM25 statistics of every passage the groups hold, each once."""
    from xprt_st.losses.hybrid_teacher import corpus_lexicon

    columns = [name for name, feature in dataset.features.items() if getattr(feature, "dtype", None) == "string"]
    return {"lexicon": corpus_lexicon((text for name in columns for text in dataset[name]), model)}


register_objective(
    Objective(
        name="hybrid-teacher",
        summary="L_xp + KL toward the fused BM25 + start ranking of each batch's candidates, on the start's scale",
        loss_class="xprt_st.losses:HybridTeacherLoss",
        columns=(ANCHOR, POSITIVE),
        retention_columns=(ANCHOR, POSITIVE),
        native_retention=True,
        arg_bounds={
            "temperature": POSITIVE_NUMBER,
            "hard_negatives": NON_NEGATIVE,
            "hybrid_weight": NON_NEGATIVE,
            "lexical_weight": NON_NEGATIVE,
            "lexical_candidates": NON_NEGATIVE,
        },
        extra_columns=teacher_columns,
        from_data=_hybrid_teacher_data,
        data_args=("lexicon",),
    )
)


def get_objective(name: str) -> Objective:
    """The registered objective ``name`` (KeyError listing the registered ones)."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise KeyError(f"unknown objective {name!r}; registered: {', '.join(sorted(OBJECTIVES))}") from None


def check_objective(name: str, args: dict[str, Any], retention: bool) -> list[str]:
    """Problems with an objective name and its arguments, found without building anything (see :func:`bind_args`)."""
    return bind_args(name, args)[1]


def bind_args(name: str, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Check objective ``name``'s arguments without building anything: names, types, ranges, rules across them.

    Each argument is checked against the type of the loss's signature (the recipe binder's checks: a float
    argument takes ``1e-6`` written without a dot, which YAML reads as a string) and against
    :attr:`Objective.arg_bounds`; every problem is one line naming the key, the value and what is accepted.

    Returns:
        The arguments as the loss should receive them (numbers coerced) and the problems.

    Example:
        >>> args, problems = bind_args("xprt", {"cross_weight": -1, "temperature": "hot"})
        >>> for problem in problems:
        ...     print(problem)
        objective.args.cross_weight: -1 is out of range; XPRTLoss accepts a number >= 0
        objective.args.temperature: must be a number, found 'hot'
        >>> bind_args("cross-passage", {"temperature": "1e-2"})
        ({'temperature': 0.01}, [])
    """
    from xprt_st.binding import convert, is_invalid

    if name not in OBJECTIVES:
        return args, [f"objective.name: {name!r} is not a registered objective; valid: {', '.join(sorted(OBJECTIVES))}"]
    objective = OBJECTIVES[name]
    try:
        accepted = objective.accepted_args()
        loss_class = objective.resolve_class()
    except ObjectiveUnavailableError as error:
        return args, [f"objective.name: {error}"]
    class_name = objective.loss_class.split(":")[1]
    try:
        hints = typing.get_type_hints(loss_class.__init__)
    except (NameError, TypeError):  # a loss annotated with names its module does not define: names checked only
        hints = {}
    problems: list[str] = []
    bound: dict[str, Any] = {}
    for key, value in args.items():
        if key in objective.fixed_args:
            problems.append(f"objective.args.{key}: fixed to {objective.fixed_args[key]!r} by objective {name!r}")
            continue
        if accepted is not None and key not in accepted:
            problems.append(
                f"objective.args.{key}: not an argument of {class_name}; valid: {', '.join(accepted) or 'none'}"
            )
            continue
        converted = convert(hints[key], value, f"objective.args.{key}", problems) if key in hints else value
        if is_invalid(converted):
            continue
        limits = objective.arg_bounds.get(key)
        if limits is not None and converted is not None and not limits.contains(converted):
            problems.append(
                f"objective.args.{key}: {value!r} is out of range; {class_name} accepts a number {limits.describe()}"
            )
            continue
        bound[key] = converted
    if not problems and objective.arg_rules is not None:
        problems += objective.arg_rules({**bound, **objective.fixed_args})
    return bound, problems


def trained_vector_problems(name: str, args: dict[str, Any]) -> list[str]:
    """Problems when objective ``name`` with ``args`` trains a vector other than the model's own pooling.

    A comparison serves and evaluates every model, the start included, with the model's own pooling; an
    objective that shapes another vector (RetroMAE's [CLS] on a mean-pooled model) would be scored on a vector
    it never trained. The comparison runner refuses such a recipe before anything runs.
    """
    objective = OBJECTIVES.get(name)
    if objective is None or objective.vector_arg is None:
        return []
    parameter = inspect.signature(objective.resolve_class().__init__).parameters[objective.vector_arg]
    value = args.get(objective.vector_arg, parameter.default)
    if value == "model":
        return []
    return [
        f"objective.args.{objective.vector_arg}: {value!r} trains a vector other than the model's own pooling, "
        f"which the comparison serves and evaluates for every recipe and for the start; set "
        f"objective.args.{objective.vector_arg}: model in the recipe"
    ]


def build_loss(
    name: str,
    model: SentenceTransformer,
    args: dict[str, Any] | None = None,
    teacher: SentenceTransformer | None = None,
    retention_weight: float = 40.0,
    distributed: bool = False,
    retention_columns: tuple[int, int] | None = None,
    data_args: dict[str, Any] | None = None,
) -> nn.Module:
    """Build the loss of objective ``name``, with the retention term toward ``teacher`` when one is given.

    The retention term is the loss's own (XPRTLoss) or added by ``WithRetention`` (every other objective).

    With ``distributed`` true, losses that can gather in-batch negatives across processes do so unless
    ``args`` says otherwise, so same-document masking and negatives are global under torchrun.

    ``retention_columns``: where the retention term's (anchor, positive) text is, when it is not the first two
    columns (:mod:`xprt_st.training.retention_text`); only with a teacher.

    ``data_args``: the arguments :attr:`Objective.from_data` counted from the training groups.
    """
    objective = get_objective(name)
    loss_class = objective.resolve_class()
    missing = [arg for arg in objective.data_args if arg not in (data_args or {})]
    if missing:
        raise ValueError(f"objective {name!r} needs {', '.join(missing)} from its training data (Objective.from_data)")
    kwargs = {**(args or {}), **objective.fixed_args, **(data_args or {})}
    parameters = inspect.signature(loss_class.__init__).parameters
    if distributed and "gather_across_devices" in parameters:
        kwargs.setdefault("gather_across_devices", True)
    if objective.native_retention:
        if teacher is not None and retention_columns is not None:
            kwargs["retention_columns"] = retention_columns
        return loss_class(
            model, teacher=teacher, retention_weight=None if teacher is None else retention_weight, **kwargs
        )
    loss = loss_class(model, **kwargs)
    if teacher is None:
        return loss
    from xprt_st.losses import WithRetention

    if objective.loss_positions is not None:
        loss = ColumnSelect(loss, objective.loss_positions, model)
    return WithRetention(loss, teacher=teacher, retention_weight=retention_weight, retention_columns=retention_columns)
