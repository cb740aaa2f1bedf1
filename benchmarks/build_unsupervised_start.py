"""Build the unsupervised retriever start (the E5-unsupervised analogue) from the small BERT, in one command.

The paper continues pre-training from E5-base-unsupervised: a BERT trained contrastively on text pairs
without labels. Its analogue here: the small BERT of ``benchmarks/pretrain_small_bert.py`` (MLM from
scratch), trained with the ``random-span-contrastive`` recipe (Contriever-style: two random spans of one
document are a positive pair) on the comparison's corpus until its evaluation stops improving much.
``benchmarks/compare-unsupervised-cpu.yaml`` then continues pre-training from it with every objective.

Run:      python benchmarks/build_unsupervised_start.py --config benchmarks/unsupervised-start.yaml \\
              --output runs/unsupervised-start
Override: ... --max-steps 600 --eval-every 100   (any of the config's ``stopping`` keys, and max_steps)

Stages, each skipped when its output is complete (a killed build continues where it stopped):

1. **Corpus and pairs**: the config's seeded corpus sample (as ``xprt-st compare`` writes it), cut into
   passages with ``mining_model``'s tokenizer and drawn as random-span pairs into
   ``OUTPUT/data/pairs-random-span`` (nothing is encoded: random spans need no embedding).
2. **Contrastive training** from ``model`` (the small BERT; it must hold ``pretraining.json``) with the
   ``from-bert`` setting's schedule and the config's ``training`` overrides, into ``OUTPUT/model``. Every
   ``stopping.eval_every`` steps the checkpoint is evaluated on the config's tasks (the small BERT itself
   at step 0); training stops once the mean score has risen by less than ``stopping.min_delta`` over the
   best so far for ``stopping.patience`` evaluations in a row, or at ``training.max_steps``.
3. **Record**: ``OUTPUT/unsupervised_start.json``: the curve (step, contrastive tokens seen, per-task
   scores, mean), why training stopped, the final scores, and the small BERT's own record (MLM tokens
   seen, held-out MLM loss before and after). ``OUTPUT/model`` is the start of the comparison.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

from xprt_st.compare import (
    CORPUS_FILE,
    CompareConfig,
    CompareConfigError,
    build_corpus,
    data_variant,
    resolve_compare_tasks,
)

logger = logging.getLogger("build_unsupervised_start")

RECIPE = "random-span-contrastive"
RECORD = "unsupervised_start.json"
CURVE = "curve.json"


@dataclass
class Stopping:
    """When contrastive training has stopped improving much."""

    eval_every: int = 100
    """Steps between evaluations (and checkpoints)."""
    min_delta: float = 0.005
    """Smallest rise of the mean score (0-1 scale) over the best so far that counts as an improvement."""
    patience: int = 2
    """Evaluations in a row without an improvement before training stops."""


def load_config(path: Path, overrides: dict[str, Any]) -> tuple[CompareConfig, Stopping]:
    """The comparison-style config (corpus, mining, model, tasks, training) and its ``stopping`` section."""
    if not path.is_file():
        raise CompareConfigError(f"no config {path}; the shipped one is benchmarks/unsupervised-start.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    stopping_raw = {**(raw.pop("stopping", None) or {}), **{k: v for k, v in overrides.items() if k != "max_steps"}}
    unknown = sorted(set(stopping_raw) - set(Stopping.__dataclass_fields__))
    if unknown:
        raise CompareConfigError(f"{path}: stopping.{unknown[0]}: unknown key; valid: eval_every, min_delta, patience")
    stopping = Stopping(**stopping_raw)
    if stopping.eval_every < 1 or stopping.patience < 1:
        raise CompareConfigError(f"{path}: stopping.eval_every and stopping.patience must be at least 1")
    raw["recipes"] = [RECIPE]
    raw.setdefault("setting", "from-bert")
    if overrides.get("max_steps") is not None:
        raw["training"] = {**(raw.get("training") or {}), "max_steps": overrides["max_steps"]}
    # Every eval_every steps a checkpoint, all kept: the curve is read from them.
    raw["training"] = {**(raw.get("training") or {}), "save_steps": stopping.eval_every, "save_total_limit": None}
    config = CompareConfig.from_dict(raw, source=str(path))
    if int(config.training.get("max_steps", -1)) < 1:
        raise CompareConfigError(f"{path}: training.max_steps: give the most contrastive steps, e.g. 1200")
    if len(config.seeds) != 1:
        raise CompareConfigError(f"{path}: seeds: the start is built once; give one seed, found {config.seeds}")
    return config, stopping


def evaluate_folder(folder: Path, label: str, tasks: list[Any], config: CompareConfig) -> dict[str, float]:
    """Main score per task of the model in ``folder`` at the config's evaluation token limit."""
    from xprt_st.evaluation.run import evaluate_models
    from xprt_st.models import load_model

    model = load_model(str(folder), device=config.device)
    model.max_seq_length = config.eval_max_seq_length
    report = evaluate_models([model], tasks, labels=[label], batch_size=config.eval_batch_size, cache_dir=None)
    return {task: report.score(label, task) for task in report.tasks}


class StopWhenFlat(TrainerCallback):
    """Evaluate each saved checkpoint; stop training once the mean score stops rising by ``min_delta``."""

    def __init__(
        self, curve_path: Path, tasks: list[Any], config: CompareConfig, stopping: Stopping, tokens_per_step: int
    ) -> None:
        self.curve_path, self.tasks, self.config, self.stopping = curve_path, tasks, config, stopping
        self.tokens_per_step = tokens_per_step
        self.curve: list[dict[str, Any]] = json.loads(curve_path.read_text()) if curve_path.is_file() else []

    def add(self, step: int, scores: dict[str, float]) -> None:
        """Record one evaluation (kept on disk, so a resumed build keeps its curve)."""
        self.curve = [point for point in self.curve if point["step"] != step]
        point = {"step": step, "tokens_seen": step * self.tokens_per_step, "scores": scores}
        self.curve.append({**point, "mean": statistics.fmean(scores.values())})
        self.curve.sort(key=lambda point: point["step"])
        self.curve_path.write_text(json.dumps(self.curve, indent=2) + "\n", encoding="utf-8")

    def evaluated(self, step: int) -> bool:
        return any(point["step"] == step for point in self.curve)

    def flat(self) -> bool:
        """True when the last ``patience`` evaluations each rose less than ``min_delta`` over the best before them."""
        if len(self.curve) <= self.stopping.patience:
            return False
        means = [point["mean"] for point in self.curve]
        best_before = max(means[: -self.stopping.patience])
        return all(mean < best_before + self.stopping.min_delta for mean in means[-self.stopping.patience :])

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        started = time.perf_counter()
        self.add(
            step, evaluate_folder(Path(args.output_dir) / f"checkpoint-{step}", f"step-{step}", self.tasks, self.config)
        )
        logger.info("step %d: mean score %.4f (%.0f s)", step, self.curve[-1]["mean"], time.perf_counter() - started)
        if self.flat():
            logger.info(
                "step %d: %d evaluation(s) without a rise of %s; stopping",
                step,
                self.stopping.patience,
                self.stopping.min_delta,
            )
            control.should_training_stop = True
        return control


def build(config: CompareConfig, stopping: Stopping, output: Path, progress: bool = True) -> dict[str, Any]:
    """Run the three stages into ``output`` (see the module doc) and return the record."""
    from xprt_st.mining import mine
    from xprt_st.recipe import load_recipe
    from xprt_st.training import train_recipe
    from xprt_st.training.trainer import last_complete_checkpoint

    bert = config.resolve(config.model) if config.model else None
    if bert is None or not (bert / "pretraining.json").is_file():
        raise CompareConfigError(
            f"model: {config.model!r} is not a finished small BERT (no pretraining.json); "
            "build it first: python benchmarks/pretrain_small_bert.py --output runs/small-bert"
        )
    output.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    build_corpus(config, output / "corpus")
    recipe = load_recipe(RECIPE, overrides=config.recipe_overrides(config.seeds[0]), setting=config.setting)
    variant, options = data_variant(recipe.data.requires)
    data = output / "data" / variant
    # Random-span pairs need no encoder (MiningConfig.encodes): mining only cuts the passages whose lengths the
    # spans take, with the mining model's tokenizer, and draws the spans with the corpus seed.
    pairs = mine(
        [output / "corpus" / CORPUS_FILE],
        data,
        model=config.mining_model or config.model,
        progress=progress,
        **{**config.mining, **options, "seed": config.corpus_seed},
    )
    timings["corpus+pairs"] = round(time.perf_counter() - started, 1)

    tasks = resolve_compare_tasks(config)
    model_dir = output / "model"
    # Contrastive tokens per step, at most: two spans per pair, each padded to the token limit.
    tokens_per_step = recipe.training.batch_size * 2 * int(recipe.training.max_seq_length or 512)
    callback = StopWhenFlat(output / CURVE, tasks, config, stopping, tokens_per_step)
    if not callback.evaluated(0):
        callback.add(0, evaluate_folder(bert, "step-0", tasks, config))
    marker = model_dir / "COMPLETE"
    if not marker.is_file():
        started = time.perf_counter()
        resume = "last" if last_complete_checkpoint(model_dir) is not None else None
        train_recipe(recipe, data, model_dir, resume=resume, progress=progress, callbacks=[callback])
        # The last step is the stopping step, or max_steps (which need not be a multiple of eval_every).
        stopped = "flat" if callback.flat() else "max_steps"
        saved = [int(path.name.split("-")[1]) for path in model_dir.glob("checkpoint-*")]
        steps = max(saved) if stopped == "flat" else recipe.training.max_steps
        marker.write_text(json.dumps({"recipe": RECIPE, "steps": steps, "stopped": stopped}) + "\n", encoding="utf-8")
        timings["train+evaluate checkpoints"] = round(time.perf_counter() - started, 1)
    finished = json.loads(marker.read_text(encoding="utf-8"))
    steps = finished["steps"]
    if not callback.evaluated(steps):
        callback.add(steps, evaluate_folder(model_dir, f"step-{steps}", tasks, config))
    record = {
        "start": str(model_dir),
        "small_bert": json.loads((bert / "pretraining.json").read_text(encoding="utf-8")),
        "recipe": RECIPE,
        "setting": config.setting,
        "training": config.training,
        "pairs": {k: pairs.get(k) for k in ("groups", "documents", "passages") if k in pairs},
        "stopping": stopping.__dict__,
        "stopped": finished["stopped"],
        "steps": steps,
        "contrastive_tokens_seen": steps * tokens_per_step,
        "curve": callback.curve,
        "final_scores": next(point["scores"] for point in callback.curve if point["step"] == steps),
        "best": max(callback.curve, key=lambda point: point["mean"]),
        "timings": timings,
    }
    (output / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("benchmarks/unsupervised-start.yaml"))
    parser.add_argument("--output", type=Path, required=True, help="build folder; reuse it to continue a killed build")
    parser.add_argument("--max-steps", type=int, default=None, help="contrastive steps at most (replaces the config's)")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--min-delta", type=float, default=None)
    parser.add_argument("--patience", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {
        key: getattr(args, key)
        for key in ("max_steps", "eval_every", "min_delta", "patience")
        if getattr(args, key) is not None
    }
    try:
        config, stopping = load_config(args.config, overrides)
        record = build(config, stopping, args.output, progress=not args.no_progress)
    except CompareConfigError as error:
        sys.exit(f"error: {error}")
    best = record["best"]
    logger.info(
        "unsupervised start: %s after %d steps (%s); final mean %.4f, best %.4f at step %d",
        record["start"],
        record["steps"],
        record["stopped"],
        record["curve"][-1]["mean"],
        best["mean"],
        best["step"],
    )


if __name__ == "__main__":
    main()
