"""Recipes: YAML files that name an objective and the data it needs, read into validated dataclasses.

A recipe states only what makes it different: its objective (the loss and its arguments) and the
mining options its data needs. The training values (starting model, learning rate, epochs, retention)
come from one of two *settings* defined once, here, with the paper's values:

- ``continued``: continued pre-training of an already contrastive model (the paper starts from
  E5-base-unsupervised at learning rate 1e-6, with the retention term, weight 40 -> 0, for every method;
  here lr 2e-5, the in-domain sweep's best: 1e-6 moved nothing measurable, docs/results/11-in-domain.md);
- ``from-bert``: pre-training from BERT (the paper trains 6 epochs; no retention, since there is nothing
  to retain).

Everything else (batch, steps, schedule, sequence length) is a :class:`TrainingSpec` default, so every
baseline uses the same groups, steps, batch and schedule as xPRT and a comparison changes only the
objective. Precedence, lowest first: ``TrainingSpec``/``RetentionSpec`` defaults, the setting, the
recipe's own ``training:``/``retention:`` keys, command-line overrides.

Validation binds every value without building anything and reports ALL problems at once, each naming
the key, the file, and the valid keys or values.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from xprt_st.binding import INTERNAL, bind
from xprt_st.errors import XPRTError
from xprt_st.models import DEFAULT_MODEL

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
"""Packaged recipes; the repository's ``recipes/`` is a symlink to this folder."""

Precision = Literal["auto", "fp32", "bf16", "fp16"]
ScheduleShape = Literal["linear", "cosine", "constant"]
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial")


class RecipeError(XPRTError, ValueError):
    """One or more problems in a recipe; ``problems`` lists each one.

    Problems with a value given on the command line (``flag_problems``, each starting with the flag, e.g.
    ``--learning-rate: must be positive, got -1.0``) are reported as the flag's, not as the recipe file's.
    One problem is one line.
    """

    def __init__(self, source: str, problems: list[str], flag_problems: list[str] | None = None) -> None:
        self.source = source
        self.file_problems = list(problems)
        self.flag_problems = list(flag_problems or [])
        self.problems = self.file_problems + self.flag_problems
        super().__init__(self._message())

    def _message(self) -> str:
        if len(self.problems) == 1:
            return self.flag_problems[0] if self.flag_problems else f"recipe {self.source}: {self.file_problems[0]}"
        if not self.flag_problems:
            where = f" in recipe {self.source}"
            lines = self.file_problems
        else:
            where = "" if self.file_problems else " in the command line"
            lines = [f"recipe {self.source}: {p}" for p in self.file_problems] + self.flag_problems
        return f"{len(self.problems)} problem(s){where}:\n" + "\n".join(f"  - {p}" for p in lines)


def override_flag(dotted: str) -> str:
    """The command-line flag named after an override key (``training.learning_rate`` -> ``--learning-rate``).

    Example:
        >>> override_flag("training.max_seq_length")
        '--max-seq-length'
    """
    return "--" + dotted.rsplit(".", 1)[-1].replace("_", "-")


@dataclass
class ObjectiveSpec:
    """The training objective: a registered loss and its keyword arguments."""

    name: str = field(
        metadata={
            "help": "Registered objective: xprt, cross-passage, self-only, retromae, tsdae (see xprt_st/objectives.py)."
        }
    )
    args: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Keyword arguments of the objective's loss, e.g. {temperature: 0.05}; checked against it."},
    )


@dataclass
class DataSpec:
    """What the mined data must be."""

    requires: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Mining options the data must have been mined with, compared with DIR/stats.json, "
            "e.g. {positive: random} or {pairs: random-span}."
        },
    )


@dataclass
class ScheduleSpec:
    """A loss weight that moves from ``start`` to ``end`` over training."""

    start: float = field(metadata={"help": "Value at the first step."})
    end: float = field(metadata={"help": "Value at the last step."})
    shape: ScheduleShape = field(default="linear", metadata={"help": "linear, cosine or constant."})


@dataclass
class RetentionSpec:
    """The retention term toward the frozen starting model (continued pre-training only)."""

    enabled: bool = field(metadata={"help": "Add the retention term (the teacher is the starting model)."})
    start: float = field(default=40.0, metadata={"help": "Retention weight at the first step (paper: 40)."})
    end: float = field(default=0.0, metadata={"help": "Retention weight at the last step (paper: 0)."})
    shape: ScheduleShape = field(default="linear", metadata={"help": "How the weight falls: linear (paper), cosine."})


@dataclass
class TrainingSpec:
    """Optimisation values shared by every recipe of a setting."""

    model: str = field(metadata={"help": "Starting model: a sentence-transformers name or a local folder."})
    learning_rate: float = field(metadata={"help": "Peak learning rate (continued: 2e-5, the paper 1e-6)."})
    epochs: float = field(metadata={"help": "Passes over the mined groups when max_steps is -1 (paper from BERT: 6)."})
    warmup_ratio: float = field(metadata={"help": "Fraction of the steps spent warming the learning rate up."})
    batch_size: int = field(default=64, metadata={"help": "Groups per device and step (at least 2)."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; -1 derives them from epochs."})
    lr_scheduler: str = field(
        default="linear", metadata={"help": f"Learning-rate schedule: {', '.join(LR_SCHEDULERS)}."}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (model and loss modules)."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    max_seq_length: int | None = field(
        default=256, metadata={"help": "Token limit per passage; null keeps the model's."}
    )
    precision: Precision = field(
        default="auto",
        metadata={
            "help": "auto (bf16 autocast where the device computes bf16 natively, else fp32), fp32, bf16 or fp16 "
            "mixed precision; a run records what auto resolved to."
        },
    )
    seed: int = field(default=42, metadata={"help": "Seed for initialisation, data order and masking."})
    save_steps: int = field(default=500, metadata={"help": "Write a resumable checkpoint every N steps."})
    save_total_limit: int | None = field(default=3, metadata={"help": "Checkpoints kept; null keeps all."})
    logging_steps: int = field(default=10, metadata={"help": "Log (and show) the loss terms every N steps."})
    dataloader_num_workers: int = field(default=0, metadata={"help": "Data-loading worker processes."})
    eval_steps: int | None = field(
        default=None,
        metadata={
            "help": "With held-out documents in the data: score the label-free task every N steps; null: save_steps."
        },
    )
    keep_best: bool = field(
        default=False,
        metadata={"help": "With held-out documents: end on the checkpoint with the best label-free nDCG@10."},
    )


@dataclass
class Recipe:
    """A validated recipe. Build with :func:`load_recipe`."""

    name: str = field(metadata={"help": "Short name, used in run folders and the model card."})
    objective: ObjectiveSpec = field(metadata={"help": "The loss to train."})
    training: TrainingSpec = field(metadata={"help": "Optimisation values (from the setting unless overridden)."})
    retention: RetentionSpec = field(metadata={"help": "Retention toward the starting model."})
    description: str = field(default="", metadata={"help": "One paragraph: what this recipe trains and why."})
    setting: str = field(default="continued", metadata={"help": "continued or from-bert; see SETTINGS."})
    data: DataSpec = field(default_factory=DataSpec, metadata={"help": "What the mined data must be."})
    schedules: dict[str, ScheduleSpec] = field(
        default_factory=dict,
        metadata={"help": "Other scheduled loss attributes, e.g. {cross_weight: {start: 0.1, end: 0.0}}."},
    )
    source: str = field(
        default="", metadata={"help": "File the recipe was read from (set by load_recipe).", INTERNAL: True}
    )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for YAML dumps, checkpoints and model cards."""
        return asdict(self)


SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "continued": {
        "training": {
            "model": DEFAULT_MODEL,
            "learning_rate": 2e-5,
            "epochs": 1.0,
            "warmup_ratio": 0.0,
        },
        "retention": {"enabled": True, "start": 40.0, "end": 0.0, "shape": "linear"},
    },
    "from-bert": {
        "training": {
            "model": "bert-base-uncased",
            "learning_rate": 1e-4,
            "epochs": 6.0,
            "warmup_ratio": 0.1,
        },
        "retention": {"enabled": False},
    },
}
"""The two settings of the paper. ``continued``: the paper starts from E5-base-unsupervised (not available
offline; pass ``--model intfloat/e5-base-unsupervised`` where the hub is reachable), here the offline default,
with retention 40 -> 0 for every method, at lr 2e-5 where the paper has 1e-6: in the in-domain sweep from
all-MiniLM-L6-v2 (docs/results/11-in-domain.md) 1e-6 moved nothing measurable in 30 steps (NFCorpus +0.08, ArguAna
+0.01) and 2e-5 gave the gains (ArguAna +0.94 in 30 steps, +2.47 in 300); ``--learning-rate 1e-6`` is the paper's.
``from-bert``: BERT-base, 6 epochs over the mined groups, no retention; the paper does not
state the learning rate or warm-up here, so 1e-4 with 10% warm-up (usual for BERT pre-training) is assumed."""


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file: an existing path, or a bare name (``xprt``) looked up in :data:`RECIPES_DIR`."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (RECIPES_DIR / f"{name_or_path}.yaml", RECIPES_DIR / str(name_or_path)):
        if candidate.is_file():
            return candidate
    available = ", ".join(available_recipes())
    if path.is_dir():  # a path that exists, of another kind: not "no recipe file"
        raise RecipeError(
            str(name_or_path),
            [f"{str(name_or_path)!r} is a folder, not a recipe YAML file; packaged recipes: {available}"],
        )
    raise RecipeError(str(name_or_path), [f"no recipe file {str(name_or_path)!r}; packaged recipes: {available}"])


def available_recipes() -> list[str]:
    """Names of the packaged recipes."""
    return sorted(path.stem for path in RECIPES_DIR.glob("*.yaml"))


def load_recipe(
    name_or_path: str | Path,
    overrides: dict[str, Any] | None = None,
    setting: str | None = None,
    *,
    override_labels: Mapping[str, str] | None = None,
) -> Recipe:
    """Read, merge and validate a recipe.

    Args:
        name_or_path: a YAML path or the name of a packaged recipe (``xprt``, ``tsdae``, ...).
        overrides: dotted keys from the command line, e.g. ``{"training.max_steps": 100}``.
        setting: replaces the recipe's ``setting`` (``continued`` or ``from-bert``).
        override_labels: what to call each override (and ``setting``) in messages; by default the flag named
            after its key (:func:`override_flag`: ``--learning-rate``, ``--setting``), so a bad value given on
            the command line is reported as the flag's, not as the recipe file's.

    Raises:
        RecipeError: listing every problem, each with its key and the valid keys or values.
    """
    path = recipe_path(name_or_path)
    source = str(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RecipeError(source, [f"not valid YAML{where}: {getattr(error, 'problem', error)}"]) from error
    if not isinstance(raw, dict):
        raise RecipeError(source, [f"the file must hold a mapping of keys, found {type(raw).__name__}"])
    return build_recipe(raw, source=source, overrides=overrides, setting=setting, override_labels=override_labels)


def build_recipe(
    raw: dict[str, Any],
    source: str = "<dict>",
    overrides: dict[str, Any] | None = None,
    setting: str | None = None,
    *,
    override_labels: Mapping[str, str] | None = None,
) -> Recipe:
    """Validate an already parsed recipe mapping (see :func:`load_recipe`)."""
    problems: list[str] = []
    raw = copy.deepcopy(raw)
    given = [key for key, value in (overrides or {}).items() if value is not None] + (
        ["setting"] * (setting is not None)
    )
    labels = {key: (override_labels or {}).get(key, override_flag(key)) for key in given}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        target = raw
        *parents, leaf = dotted.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    if setting is not None:
        raw["setting"] = setting
    chosen = raw.get("setting", "continued")
    if chosen not in SETTINGS:
        problems.append(f"setting: {chosen!r} is not a setting; valid: {', '.join(SETTINGS)}")
        chosen = "continued"
    merged = copy.deepcopy(SETTINGS[chosen])
    for section in ("training", "retention"):
        if isinstance(raw.get(section), dict):
            merged[section].update(raw[section])
            raw[section] = merged[section]
        elif section in raw:
            problems.append(f"{section}: must be a mapping of keys, found {type(raw[section]).__name__}")
            raw[section] = merged[section]
        else:
            raw[section] = merged[section]
    recipe = bind(Recipe, raw, problems)
    if recipe is not None:
        recipe.source = source
        problems += _check_values(recipe)
    else:  # the objective's arguments are checked even so: every problem at once, not one more on the next run
        problems += _objective_arg_problems(raw.get("objective"))
    if problems:
        file_problems, flag_problems = _split_by_origin(problems, labels)
        raise RecipeError(source, file_problems, flag_problems)
    assert recipe is not None
    return recipe


def _split_by_origin(problems: list[str], labels: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Problems of the file, and problems of a value given as an override, renamed after its label."""
    in_file, from_flags = [], []
    for problem in problems:
        key, _, rest = problem.partition(": ")
        label = next((labels[k] for k in labels if key == k or key.startswith(f"{k}.")), None)
        if label is None:
            in_file.append(problem)
        else:
            from_flags.append(f"{label}: {rest}" if key in labels else f"{label} ({key}): {rest}")
    return in_file, from_flags


def _objective_arg_problems(objective: object) -> list[str]:
    """The problems of a raw ``objective`` section's ``args`` where the recipe did not bind (its other problems are
    the binder's): none unless it names a registered objective and its args are a mapping."""
    from xprt_st.objectives import OBJECTIVES, bind_args

    if not isinstance(objective, dict) or objective.get("name") not in OBJECTIVES:
        return []
    args = objective.get("args", {})
    return bind_args(objective["name"], args)[1] if isinstance(args, dict) else []


def _check_values(recipe: Recipe) -> list[str]:
    problems = []
    training = recipe.training
    if training.batch_size < 2:
        problems.append(
            f"training.batch_size: {training.batch_size} groups; in-batch negatives need at least 2 per device"
        )
    if not training.learning_rate > 0:
        problems.append(f"training.learning_rate: must be positive, got {training.learning_rate}")
    if training.max_steps == 0 or training.max_steps < -1:
        problems.append(f"training.max_steps: must be -1 (use epochs) or positive, got {training.max_steps}")
    if training.max_steps == -1 and not training.epochs > 0:
        problems.append(f"training.epochs: must be positive when max_steps is -1, got {training.epochs}")
    if not 0 <= training.seed < 2**32:
        problems.append(f"training.seed: must be in [0, 2**32) (numpy's seed range), got {training.seed}")
    if training.weight_decay < 0:
        problems.append(f"training.weight_decay: must be >= 0, got {training.weight_decay}")
    if not training.max_grad_norm > 0:
        problems.append(f"training.max_grad_norm: must be positive, got {training.max_grad_norm}")
    if not 0 <= training.warmup_ratio < 1:
        problems.append(f"training.warmup_ratio: must be in [0, 1), got {training.warmup_ratio}")
    if training.lr_scheduler not in LR_SCHEDULERS:
        problems.append(f"training.lr_scheduler: {training.lr_scheduler!r} is not one of {', '.join(LR_SCHEDULERS)}")
    for key in ("save_steps", "logging_steps", "gradient_accumulation_steps"):
        if getattr(training, key) < 1:
            problems.append(f"training.{key}: must be at least 1, got {getattr(training, key)}")
    if training.eval_steps is not None and training.eval_steps < 1:
        problems.append(f"training.eval_steps: must be at least 1 or null, got {training.eval_steps}")
    elif training.keep_best and training.save_steps % (training.eval_steps or training.save_steps):
        problems.append(
            f"training.keep_best: the best checkpoint must be a saved one, so save_steps ({training.save_steps}) must "
            f"be a multiple of eval_steps ({training.eval_steps})"
        )
    if recipe.retention.start < 0 or recipe.retention.end < 0:
        problems.append("retention.start/end: weights must be non-negative")
    if recipe.retention.enabled and recipe.setting == "from-bert":
        problems.append("retention.enabled: the from-bert setting has no starting model worth retaining; set false")
    from xprt_st.objectives import bind_args

    args, objective_problems = bind_args(recipe.objective.name, recipe.objective.args)
    if not objective_problems:
        recipe.objective.args = args  # numbers as the loss takes them (YAML reads 1e-6 as a string)
    return problems + objective_problems


def describe_fields(cls: type = Recipe, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, help text) for every recipe field, for ``--help`` style listings and docs."""
    rows = []
    for spec in fields(cls):
        if spec.metadata.get(INTERNAL):
            continue
        hint = typing.get_type_hints(cls)[spec.name]
        rows.append((f"{prefix}{spec.name}", spec.metadata.get("help", "")))
        if is_dataclass(hint):
            rows += describe_fields(hint, prefix=f"{prefix}{spec.name}.")
    return rows
