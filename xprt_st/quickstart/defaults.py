"""The quickstart's defaults and closing notes, apart from the run so that the CLI reads them without loading torch.

:mod:`xprt_st.quickstart` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_GAIN_NOTE = (
    "No measurable gain: the gain's 95% interval is not above 0 on every task. The offline default "
    "(all-MiniLM-L6-v2) is already fine-tuned on about a billion labelled pairs: at this scale most objectives "
    "leave it where it was; pre-trained on the corpus it searches, it gained clearly on ArguAna only "
    "(hybrid-teacher-hard +4.2 and +4.4 in 300 steps, change-only-positive-hard +2.4 and +2.2), and none improves "
    "an unsupervised retriever (docs/results/, studies 01, 02, 07, 08, 11 and 17). "
    "The objectives gain from a model that cannot retrieve yet: from BERT, on other text, 40-120 steps, "
    "studies 03b to 05 (xprt-st compare --config benchmarks/compare-from-bert-cpu.yaml)."
)
"""Printed under the quickstart's table when the pre-training did not gain (the docs' findings, in brief)."""

LOSS_NOTE = (
    "A measurable loss: the gain's 95% interval is below 0 on {tasks}. Keep the starting model. Fewer steps "
    "(--max-steps) or a larger corpus is the change to try: every gain measured in-domain came within a third of "
    "a pass over the mined groups (docs/results/11-in-domain.md)."
)
"""Printed instead of :data:`NO_GAIN_NOTE` when some task's interval lies below 0 (``{tasks}``: their names)."""


def closing_note(summary: dict) -> str | None:
    """What the quickstart prints under its table: None after a gain on every task, :data:`LOSS_NOTE` when some
    task's interval lies below 0, else :data:`NO_GAIN_NOTE`.

    Example:
        >>> closing_note({"gained": False, "interval": {"my-beir": {"verdict": "loss"}}})[:20]
        'A measurable loss: t'
    """
    from xprt_st.evaluation.bootstrap import LOSS

    if summary.get("gained"):
        return None
    lost = [task for task, fields in summary.get("interval", {}).items() if (fields or {}).get("verdict") == LOSS]
    return LOSS_NOTE.format(tasks=", ".join(lost)) if lost else NO_GAIN_NOTE


def hybrid_note(summary: dict) -> str | None:
    """What to serve where a hybrid (BM25 fused with a model by reciprocal-rank fusion) is ahead of the start, the
    trained model and BM25 alone, each beyond its interval (``summary.json``'s ``hybrid.serve_hybrid``); with
    whether pre-training still adds to the hybrid. None where no task has such a hybrid.

    Example:
        >>> hybrid = {"serve_hybrid": {"faq": "hybrid:start"},
        ...           "trained_minus_start": {"faq": {"difference": -0.004, "ci_low": "-0.02", "ci_high": "0.01",
        ...                                           "verdict": "no clear difference"}}}
        >>> print(hybrid_note({"hybrid": hybrid}))
        Serve a hybrid on faq: BM25 fused with the starting model (hybrid:start) is ahead of the start, the trained \
model and BM25 alone, each beyond its 95% interval. Pre-training adds nothing measurable to the hybrid (trained \
minus start -0.0040 [-0.0200, +0.0100]): the starting model's hybrid serves as well.
    """
    from xprt_st.evaluation.bootstrap import GAIN, LOSS

    hybrid = summary.get("hybrid") or {}
    lines = []
    for task, best in (hybrid.get("serve_hybrid") or {}).items():
        if not best:
            continue
        fields = hybrid["trained_minus_start"][task]
        interval = f"{fields['difference']:+.4f} [{float(fields['ci_low']):+.4f}, {float(fields['ci_high']):+.4f}]"
        which = "the trained model" if best.endswith("trained") else "the starting model"
        if fields["verdict"] == GAIN:
            adds = (
                f"Pre-training adds to the hybrid (trained minus start {interval}): serve the trained model's hybrid."
            )
        elif fields["verdict"] == LOSS:
            adds = (
                f"Pre-training lowers the hybrid (trained minus start {interval}): serve the starting model's hybrid."
            )
        else:
            adds = (
                f"Pre-training adds nothing measurable to the hybrid (trained minus start {interval}): the starting "
                "model's hybrid serves as well."
            )
        lines.append(
            f"Serve a hybrid on {task}: BM25 fused with {which} ({best}) is ahead of the start, the trained model and "
            f"BM25 alone, each beyond its 95% interval. {adds}"
        )
    return "\n".join(lines) or None


LABEL_FREE_NOTE = (
    "A drift and sanity signal, not a verdict: the held-out documents' related passages were chosen by the "
    "mining model, so this check is of the objective's own kind (README, 'Did it help?')."
)
"""Printed under the label-free line: how far to trust it."""


@dataclass(frozen=True)
class QuickstartDefaults:
    """The quickstart's mining and training settings, on the shipped data and on a user's corpus alike."""

    recipe: str = "hybrid-teacher-hard"
    """Adoption step 1 with hard negatives (L_xp, retention, 2 nearest passages of other documents per anchor) plus
    a teacher: the fusion of the corpus's BM25 and the frozen start over each batch's candidates, on the start's
    scale. The measured best in-domain recipe from all-MiniLM-L6-v2 (docs/results/17-corpus-words.md: 300 steps, three
    corpora, two seeds): above ``change-only-positive-hard`` in all six runs, beyond the interval in both seeds on
    ArguAna (+1.79 and +2.14 nDCG@10), within it on NFCorpus and the Python documentation; the same mined groups."""
    threshold_quantile: float | None = 0.3
    """Anchors are the passages above this quantile of centrality (the paper's 0.825 was tuned for E5)."""
    max_steps: int = 20
    """On the shipped pages: a demonstration that every stage runs, in minutes."""
    corpus_max_steps: int = 300
    """With ``--corpus``: the measured best point of the in-domain sweep (docs/results/11-in-domain.md: on ArguAna,
    mean of two seeds, +2.86 at 300 steps, +2.07 at 100, +0.78 at 30; NFCorpus +0.43 against +0.42 at 30), about
    20 minutes of CPU training; at most one pass over the mined groups (:func:`corpus_steps`)."""
    batch_size: int = 16
    learning_rate: float = 2e-5
    """The ``continued`` setting's, and the in-domain sweep's best (the paper's 1e-6 moved nothing measurable in 30
    or 100 steps; 5e-6 gained +1.57 on ArguAna in 300 steps where 2e-5 gained +2.47 and +3.25)."""
    max_seq_length: int = 128


DEFAULTS = QuickstartDefaults()
"""The one place that holds the quickstart's defaults (the CLI's options read them too)."""


def corpus_steps(groups: int, batch_size: int, steps: int = DEFAULTS.corpus_max_steps) -> int:
    """The default training steps on a user's corpus: ``steps``, but never more than one pass over its groups.

    Every in-domain gain of docs/results/11-in-domain.md came within a third of a pass (300 steps of 16 are 0.28 of
    ArguAna's 17,246 groups), and the one run that passed over its groups again, 300 steps over the 1,324 groups
    of 600 NFCorpus documents (3.6 passes), lost 1.16 nDCG@10 points [-2.36, -0.13]. ``--max-steps`` overrides it.

    Example:
        >>> corpus_steps(17_246, 16), corpus_steps(1_324, 16), corpus_steps(20, 16)
        (300, 82, 1)
    """
    return max(1, min(steps, groups // max(1, batch_size)))


HOLDOUT = 0.1
"""The quickstart's held-out fraction: 14 of the 100 shipped pages with seed 42 (the draw hashes the page ids),
so the label-free line rests on a few hundred anchors from a dozen documents. 0.2 (27 pages) narrows the
interval but costs a quarter more CPU time, encoding the held-out passages twice; training uses 320 groups
of the rest, which hold over a thousand."""
