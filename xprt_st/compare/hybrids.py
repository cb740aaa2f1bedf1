"""A comparison's hybrid lines: BM25 fused with the start and with each trained model, on the retrieval tasks.

A team that serves BM25 beside its dense model asks whether pre-training still adds to that hybrid, or whether it
taught the dense model what BM25 already gives. Each line is scored once, like the BM25 reference
(:func:`xprt_st.compare.run.evaluate_reference`), into ``run/scores/KEY/hybrid/`` (``start.json``, and
``seed-N/RECIPE.json``: a folder of their own, so no recipe's name can meet a hybrid's), and kept out of every mean
and gain; the report compares each recipe's hybrid with the start's, per seed, with its paired interval.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xprt_st.compare.results import hybrid_file, per_item_record

if TYPE_CHECKING:
    from xprt_st.compare.config import CompareConfig
    from xprt_st.compare.results import CompareResult

__all__ = ["evaluate_hybrid", "hybrid_file", "labelled_retrieval", "serve_hybrid"]


def labelled_retrieval(tasks: Sequence[Any]) -> list[Any]:
    """The retrieval tasks with labels among ``tasks``: the only ones BM25 and a hybrid score."""
    from xprt_st.evaluation.run import is_label_free
    from xprt_st.evaluation.tasks import task_label

    return [task for task in tasks if task.metadata.type == "Retrieval" and not is_label_free(task_label(task))]


def evaluate_hybrid(
    config: CompareConfig, model: str, label: str, target: Path, tasks: Sequence[Any], cache_dir: Path
) -> bool:
    """Score ``hybrid:MODEL`` on the retrieval tasks into ``target`` (as the dense scores are: the comparison's token
    limit, batch and precision), unless it is there; False when there was nothing to score or it was kept."""
    from xprt_st.evaluation.lexical import HYBRID_PREFIX
    from xprt_st.evaluation.run import evaluate_models

    retrieval = labelled_retrieval(tasks)
    if not retrieval or target.is_file():
        return False
    report = evaluate_models(
        [f"{HYBRID_PREFIX}{model}"],
        retrieval,
        labels=[label],
        batch_size=config.eval_batch_size,
        cache_dir=cache_dir,
        device=config.device,
        precision=config.evaluation_precision().precision,
        max_seq_length=config.eval_max_seq_length,
    )
    payload = {
        "model": f"{HYBRID_PREFIX}{model}",
        "scores": {task: report.score(label, task) for task in report.tasks},
        "per_item": per_item_record(report, label),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.tmp-{os.getpid()}")  # a kill mid-write leaves no half file
    partial.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, target)
    return True


def _hybrid_scores(result: CompareResult, model: str, task: str) -> list[float]:
    """``model``'s hybrid score on ``task`` in each seed that has it."""
    return [
        rows[model]["scores"][task] for rows in result.hybrids.values() if task in rows.get(model, {}).get("scores", {})
    ]


def serve_hybrid(result: CompareResult, task: str) -> str | None:
    """The hybrid to serve on ``task``: the best one (mean over seeds) where, in every seed that has it, it is ahead
    of every single model (BM25, the start and each recipe's dense model) beyond its paired 95% interval; None
    where no hybrid is."""
    from xprt_st.evaluation.bootstrap import GAIN, paired_interval, paired_items

    scored = {model: _hybrid_scores(result, model, task) for model in result.models}
    scored = {model: values for model, values in scored.items() if values}
    if not scored or task not in result.reference.get("per_item", {}):
        return None
    best = max(scored, key=lambda model: sum(scored[model]) / len(scored[model]))
    for seed, rows in result.hybrids.items():
        if best not in rows or task not in rows[best].get("per_item", {}):
            continue
        fused = rows[best]["per_item"][task]
        singles = [items[task] for items in result.per_item.get(seed, {}).values() if task in items]
        singles.append(result.reference["per_item"][task])
        if any(paired_interval(paired_items(fused, single)).verdict != GAIN for single in singles):
            return None
    return best
