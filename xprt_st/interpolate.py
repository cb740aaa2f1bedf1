"""Weight interpolation of a starting model and its pre-trained result (WiSE-FT), chosen without labels.

``interpolate(start, trained, alpha)`` is a plain SentenceTransformer whose every floating-point weight
is ``(1 - alpha) * start + alpha * trained``: ``alpha = 0`` is the start, ``alpha = 1`` the trained
model, both exactly (the formula is written out rather than as ``start + alpha * (trained - start)``,
which rounds at ``alpha = 1``). Wortsman et al. (WiSE-FT, CVPR 2022) find that such a mix of a
zero-shot model and its fine-tuned version often beats both ends on shifted data; LM-Cocktail
(FlagEmbedding) merges embedding models the same way to keep what the start knew. Here it is a
control against forgetting that costs no training: pick ``alpha`` on the held-out documents of the
mined folder (the label-free task, :mod:`xprt_st.evaluation.label_free`), and read the drift beside it.

Both models must have the same architecture: the same modules, of the same types and settings, with
the same tensors of the same shapes; integer buffers (position ids) must be equal. Anything else is
an :class:`ArchitectureMismatchError` naming the difference, raised before any weight is mixed. The
loss-owned modules of a trained run (decoder, MLM head: ``training_state/`` beside the model) are not
part of a SentenceTransformer and are never written: the output is a serving model only.

Example:
    >>> from xprt_st.interpolate import interpolate  # doctest: +SKIP
    >>> mixed = interpolate(start_model, trained_model, 0.5)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from sentence_transformers import SentenceTransformer
from torch import Tensor, nn

from xprt_st.errors import XPRTError

if TYPE_CHECKING:
    from xprt_st.evaluation.label_free import HeldOut

logger = logging.getLogger(__name__)

SELECTION_FILE = "interpolation.json"
"""Written inside the output model folder: the alphas tried, their label-free scores, the one chosen."""
CARD_SECTION_TITLE = "## Weight interpolation"


class ArchitectureMismatchError(XPRTError, ValueError):
    """The two models cannot be interpolated: their modules or tensors differ."""


class AlphaError(XPRTError, ValueError):
    """An interpolation weight outside [0, 1], or an unreadable list of them."""


def parse_alphas(text: str) -> list[float]:
    """``"0,0.25,0.5"`` -> ``[0.0, 0.25, 0.5]``: each in [0, 1], no repeats, in the order given.

    Raises:
        AlphaError: naming the entry that is not a number or not in [0, 1].
    """
    alphas = []
    for part in (piece.strip() for piece in text.split(",")):
        try:
            value = float(part)
        except ValueError as error:
            raise AlphaError(f"--alphas {text!r}: {part!r} is not a number; give e.g. 0,0.25,0.5,0.75,1") from error
        alphas.append(check_alpha(value))
    if not alphas:
        raise AlphaError("--alphas is empty; give e.g. 0,0.25,0.5,0.75,1")
    return list(dict.fromkeys(alphas))


def check_alpha(alpha: float) -> float:
    """``alpha`` itself when it lies in [0, 1] (0: the start, 1: the trained model)."""
    if not 0.0 <= alpha <= 1.0:
        raise AlphaError(f"alpha {alpha} is outside [0, 1] (0 is the starting model, 1 the trained one)")
    return float(alpha)


def _module_settings(module: nn.Module) -> dict[str, Any]:
    getter = getattr(module, "get_config_dict", None)
    return dict(getter()) if callable(getter) else {}


def architecture_differences(start: SentenceTransformer, trained: SentenceTransformer) -> list[str]:
    """What keeps two models from being interpolated; empty when they share an architecture."""
    problems: list[str] = []
    start_types = [type(module).__name__ for module in start]
    trained_types = [type(module).__name__ for module in trained]
    if start_types != trained_types:
        return [f"modules {start_types} vs {trained_types}"]
    for index, (a, b) in enumerate(zip(start, trained, strict=True)):
        settings_a, settings_b = _module_settings(a), _module_settings(b)
        for key in sorted(set(settings_a) | set(settings_b)):
            if settings_a.get(key) != settings_b.get(key):
                problems.append(
                    f"module {index} ({start_types[index]}) {key}: {settings_a.get(key)!r} vs {settings_b.get(key)!r}"
                )
        config_a = getattr(getattr(a, "auto_model", None), "config", None)
        config_b = getattr(getattr(b, "auto_model", None), "config", None)
        if config_a is not None and config_b is not None:
            shape_keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
            for key in shape_keys:
                value_a, value_b = getattr(config_a, key, None), getattr(config_b, key, None)
                if value_a != value_b:
                    problems.append(f"module {index} config {key}: {value_a!r} vs {value_b!r}")
    state_a, state_b = start.state_dict(), trained.state_dict()
    only_a, only_b = sorted(set(state_a) - set(state_b)), sorted(set(state_b) - set(state_a))
    if only_a or only_b:
        problems.append(
            f"tensors only in the start: {only_a[:3] or 'none'}; only in the trained: {only_b[:3] or 'none'}"
        )
    for name in sorted(set(state_a) & set(state_b)):
        a, b = state_a[name], state_b[name]
        if a.shape != b.shape:
            problems.append(f"tensor {name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
        elif a.is_floating_point() != b.is_floating_point():
            problems.append(f"tensor {name}: dtype {a.dtype} vs {b.dtype}")
        elif not a.is_floating_point() and not torch.equal(a.cpu(), b.cpu()):
            problems.append(f"integer tensor {name} differs")
    return problems


def check_same_architecture(start: SentenceTransformer, trained: SentenceTransformer) -> None:
    """Raise :class:`ArchitectureMismatchError` listing every difference (see :func:`architecture_differences`)."""
    problems = architecture_differences(start, trained)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ArchitectureMismatchError(
            f"the two models do not share an architecture, so their weights cannot be interpolated: {shown}. "
            "Interpolate a trained model with the model its training started from."
        )


def _same_model(a: str, b: str) -> bool | None:
    """Whether two model options name the same model (``default`` and its folder, two spellings of one path, one hub
    id); None when that cannot be told here (a folder against a hub id it may be a copy of, a folder moved away)."""
    from xprt_st.models import ModelLoadError, is_default_model, resolve_model_name

    def where(name: str) -> tuple[str, str]:
        if is_default_model(name):
            try:
                name = resolve_model_name(name)
            except ModelLoadError:
                return "name", name
        path = Path(name)
        if path.exists():
            return "path", str(path.resolve())
        return ("missing" if path.is_absolute() or name.startswith(".") else "name"), name

    (kind_a, a), (kind_b, b) = where(a), where(b)
    if kind_a == kind_b and kind_a != "missing":
        return a == b
    return None


def start_problem(start: str, trained: str) -> str | None:
    """Why ``trained`` must not be interpolated with ``start``: its record (``training_state/config.json``, written
    by ``xprt-st train``) names another starting model, so the mix would average two unrelated weight sets of one
    architecture. None when the record names ``start``, cannot be checked (a folder moved since), or is absent."""
    from xprt_st.training.checkpoints import TRAINING_CONFIG_FILE, TRAINING_STATE_DIR

    path = Path(trained) / TRAINING_STATE_DIR / TRAINING_CONFIG_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")).get("starting_model")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, str) or _same_model(recorded, start) is not False:
        return None
    return (
        f"TRAINED {trained} was trained from {recorded} ({path}), not from START {start}; interpolation mixes a "
        f"trained model with the model its training started from. Give START {recorded}"
    )


def interpolate_state(start: Mapping[str, Tensor], trained: Mapping[str, Tensor], alpha: float) -> dict[str, Tensor]:
    """``(1 - alpha) * start + alpha * trained`` for every floating tensor, computed in float32 and cast back.

    Integer tensors are taken from ``start`` (they must be equal; :func:`architecture_differences`).
    """
    check_alpha(alpha)
    mixed = {}
    for name, a in start.items():
        b = trained[name].to(device=a.device)
        if a.is_floating_point():
            value = (1.0 - alpha) * a.to(torch.float32) + alpha * b.to(torch.float32)
            mixed[name] = value.to(a.dtype)
        else:
            mixed[name] = a.clone()
    return mixed


def interpolate(start: SentenceTransformer, trained: SentenceTransformer, alpha: float) -> SentenceTransformer:
    """A new SentenceTransformer: ``start``'s modules with the interpolated weights (inputs unchanged)."""
    check_alpha(alpha)
    check_same_architecture(start, trained)
    mixed = copy.deepcopy(start)
    mixed.load_state_dict(interpolate_state(start.state_dict(), trained.state_dict(), alpha))
    return mixed


@dataclass
class AlphaScore:
    """One alpha on the label-free task, against the start."""

    alpha: float
    score: float
    difference: float
    ci_low: float
    ci_high: float
    verdict: str
    knn_overlap_at_10: float


@dataclass
class Selection:
    """The alphas tried on the label-free task and the one chosen."""

    start: str
    trained: str
    task: str
    start_score: float
    scores: list[AlphaScore] = field(default_factory=list)

    @property
    def chosen(self) -> AlphaScore:
        """The best label-free score; on a tie, the smallest alpha (the least drift from the start)."""
        return max(self.scores, key=lambda row: (row.score, -row.alpha))

    def to_dict(self) -> dict[str, Any]:
        """The selection as JSON-ready values: the two models, the task, every alpha's row and the pick."""
        return {
            "start": self.start,
            "trained": self.trained,
            "select": self.task,
            "rule": "highest label-free nDCG@10; ties to the smallest alpha",
            "start_score": self.start_score,
            "selected_alpha": self.chosen.alpha,
            "alphas": [vars(row) for row in self.scores],
        }


def select_alpha(
    start: SentenceTransformer,
    trained: SentenceTransformer,
    alphas: Sequence[float],
    heldout: HeldOut,
    *,
    start_name: str = "start",
    trained_name: str = "trained",
    batch_size: int = 32,
) -> tuple[Selection, SentenceTransformer]:
    """Score every alpha on the label-free task of ``heldout``; return the table and the chosen model.

    Only the best model so far is kept in memory, besides the two ends.
    """
    from xprt_st.evaluation.label_free import TASK_PREFIX, difference, drift, score_model

    check_same_architecture(start, trained)
    reference = score_model(start, heldout, batch_size)
    selection = Selection(start_name, trained_name, f"{TASK_PREFIX}{heldout.path}", reference.score)
    best: SentenceTransformer | None = None
    for alpha in alphas:
        model = interpolate(start, trained, alpha)
        result = score_model(model, heldout, batch_size)
        gain, moved = difference(result, reference), drift(result, reference)
        row = AlphaScore(alpha, result.score, gain.estimate, gain.low, gain.high, gain.verdict, moved.overlap)
        logger.info("alpha %.3g: label-free nDCG@10 %.4f (%s vs the start)", alpha, row.score, gain.format())
        selection.scores.append(row)
        if selection.chosen is row:
            best = model
    assert best is not None  # alphas is not empty: parse_alphas guarantees it
    return selection, best


def save_interpolated(
    model: SentenceTransformer,
    output: str | Path,
    *,
    start: str,
    trained: str,
    alpha: float,
    selection: Selection | None = None,
) -> Path:
    """Save the serving model to ``output`` with a model-card section (and the selection's JSON, if any).

    The folder is taken through the output guard (:func:`xprt_st.output_folder.command_folder`): a folder holding
    files ``interpolate`` did not write (a user's README.md, a mined folder, a trained run) is refused with
    :class:`~xprt_st.output_folder.OutputFolderError` before anything is written.
    """
    from xprt_st.output_folder import command_folder

    output = Path(output)
    with command_folder(output, "interpolate"):
        _save(model, output, start=start, trained=trained, alpha=alpha, selection=selection)
    return output


def _save(
    model: SentenceTransformer, output: Path, *, start: str, trained: str, alpha: float, selection: Selection | None
) -> None:
    model.save(str(output))
    lines = [
        CARD_SECTION_TITLE,
        "",
        f"Weights `(1 - alpha) * start + alpha * trained` with alpha = {alpha:g}: start `{start}`, trained `{trained}` "
        "(made with `xprt-st interpolate`; loss-owned modules of the trained run are not included).",
    ]
    if selection is not None:
        (output / SELECTION_FILE).write_text(json.dumps(selection.to_dict(), indent=2) + "\n", encoding="utf-8")
        lines += [
            "",
            f"Alpha chosen by the label-free task `{selection.task}` (held-out documents; no labels):",
            "",
            "| alpha | label-free nDCG@10 | vs start, 95% CI | 10-NN overlap with the start |",
            "|---|---|---|---|",
            *(
                f"| {row.alpha:g} | {row.score:.4f} | {row.difference:+.4f} [{row.ci_low:+.4f}, {row.ci_high:+.4f}] "
                f"| {row.knn_overlap_at_10:.3f} |"
                for row in selection.scores
            ),
            "",
            "The label-free task is a drift and sanity signal, not a verdict on labelled retrieval.",
        ]
    readme = output / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    readme.write_text(text.rstrip() + ("\n\n" if text else "") + "\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class InterpolateConfig:
    """What ``xprt-st interpolate`` does: mix ``start`` and ``trained`` with one ``alpha``, or with the best of
    ``alphas`` on the label-free task ``select`` (``mined:DIR``), into ``output``.

    Made from the flags of the same names; :meth:`candidates` checks which of the two forms is given.
    """

    start: str
    trained: str
    output: Path
    alpha: float | None = None
    alphas: str | None = None
    select: str | None = None
    batch_size: int = 32
    device: str | None = None
    precision: str = "auto"
    """Of the ``select`` scoring only: the weights are mixed in fp32."""

    def candidates(self) -> list[float]:
        """The alphas to mix with: ``[alpha]``, or ``alphas`` parsed (each in [0, 1]).

        Raises:
            AlphaError: neither or both forms given, ``alphas`` without ``select`` or the other way round, or an
                alpha outside [0, 1].
        """
        if (self.alpha is None) == (self.alphas is None):
            raise AlphaError("give either --alpha A, or --alphas A1,A2,... with --select mined:DIR")
        if self.alphas is not None and self.select is None:
            raise AlphaError("--alphas needs --select mined:DIR, the mined folder whose held-out part picks alpha")
        if self.select is not None and self.alphas is None:
            raise AlphaError("--select picks among --alphas; give --alphas 0,0.25,0.5,0.75,1")
        return [check_alpha(self.alpha)] if self.alpha is not None else parse_alphas(self.alphas or "")


def run_interpolation(config: InterpolateConfig, heldout: HeldOut | None = None) -> tuple[float, Selection | None]:
    """Load both models, mix them (choosing alpha on ``heldout`` when given) and save the result to
    ``config.output``; return the alpha written and the selection table (None with one alpha).

    Raises:
        ArchitectureMismatchError: the two models differ in their modules or tensors (before anything is mixed).
    """
    from xprt_st.models import load_model
    from xprt_st.precision import resolve_precision, use_precision

    candidates = config.candidates()
    start = load_model(config.start, device=config.device)
    trained = load_model(config.trained, device=config.device)
    check_same_architecture(start, trained)
    selection = None
    if heldout is not None:  # only the label-free scoring encodes
        for loaded in (start, trained):
            use_precision(loaded, resolve_precision(config.precision, loaded.device.type).precision)
        selection, model = select_alpha(
            start,
            trained,
            candidates,
            heldout,
            start_name=config.start,
            trained_name=config.trained,
            batch_size=config.batch_size,
        )
        chosen = selection.chosen.alpha
    else:
        chosen = candidates[0]
        model = interpolate(start, trained, chosen)
    save_interpolated(
        model, config.output, start=config.start, trained=config.trained, alpha=chosen, selection=selection
    )
    return chosen, selection
