"""The step-memory estimate (issue 28): close to the measured peaks, and a batch that will not fit is named first."""

from __future__ import annotations

import logging

import pytest
import torch

from xprt_st.training import memory
from xprt_st.training.memory import (
    EncoderShape,
    StepMemoryError,
    StepPlan,
    check_step_memory,
    estimate_step_peak,
    largest_fitting_batch,
    plan_of,
)

MINILM = EncoderShape(hidden=384, layers=6, heads=12, intermediate=1536, parameters=22_713_216)
XPRT_UNCUT = StepPlan(columns=7, largest_pass=5, decoder_rows=10, teacher=True, extra_parameters=2_000_000)
XPRT = StepPlan(
    columns=7, largest_pass=5, decoder_rows=10, teacher=True, mini_batch_size=16, decoder_mini_batch_size=64,
    extra_parameters=2_000_000,
)  # fmt: skip
MNRL = StepPlan(columns=2, largest_pass=2)

MEASURED_MIB = [  # benchmarks/bench_memory.py, fresh process per point, peak RSS (docs/losses.md, "Memory")
    (MNRL, 16, 1765),
    (XPRT_UNCUT, 16, 5841),
]


def _gib(parts: dict[str, float]) -> float:
    return sum(parts.values()) / 2**30


@pytest.mark.parametrize(("plan", "batch", "measured"), MEASURED_MIB)
def test_the_estimate_is_within_a_fifth_of_the_measured_peaks(plan, batch, measured) -> None:
    estimate = sum(estimate_step_peak(MINILM, plan, batch, 128).values()) / 2**20
    assert abs(estimate - measured) / measured < 0.2, (estimate, measured)


def test_gradcache_and_decoder_blocks_bound_the_activations() -> None:
    uncut = [estimate_step_peak(MINILM, XPRT_UNCUT, batch, 128) for batch in (16, 32, 64)]
    cut = [estimate_step_peak(MINILM, XPRT, batch, 128) for batch in (16, 32, 64)]
    # uncut activations grow with the batch: 4x from 16 to 64 groups
    ratio = uncut[2]["encoder activations"] / uncut[0]["encoder activations"]
    assert ratio == pytest.approx(4.0)
    # under GradCache the encoder holds one 16-group mini-batch plus the cached outputs: nearly flat
    assert cut[2]["encoder activations"] < 1.1 * cut[1]["encoder activations"]
    assert cut[2]["decoder activations"] == cut[1]["decoder activations"]  # one 64-row block either way
    assert _gib(cut[2]) < 8 < _gib(uncut[2])  # the target at 64 groups


def test_bf16_keeps_fewer_activation_bytes() -> None:
    fp32 = estimate_step_peak(MINILM, XPRT_UNCUT, 32, 128)
    bf16 = estimate_step_peak(MINILM, XPRT_UNCUT, 32, 128, precision="bf16")
    assert bf16["encoder activations"] == pytest.approx(memory.BF16_ACTIVATIONS * fp32["encoder activations"])


def test_largest_fitting_batch_inverts_the_estimate() -> None:
    available = sum(estimate_step_peak(MINILM, XPRT_UNCUT, 40, 128).values()) + 1
    assert largest_fitting_batch(MINILM, XPRT_UNCUT, 128, available) == 40
    assert largest_fitting_batch(MINILM, XPRT_UNCUT, 128, 2**20) == 0  # 1 MiB: not even the runtime


def test_plan_of_reads_the_loss(tiny_model) -> None:
    from xprt_st.losses import XPRTLoss

    plan = plan_of(XPRTLoss(tiny_model, mini_batch_size=8), columns=5)
    assert (plan.columns, plan.largest_pass, plan.decoder_rows, plan.teacher) == (7, 5, 10, True)
    assert (plan.mini_batch_size, plan.decoder_mini_batch_size) == (8, 64) and plan.extra_parameters > 0
    positive = plan_of(XPRTLoss(tiny_model, cross_weight=0, self_weight=0, mlm_weight=0, retention_weight=None), 2)
    assert (positive.columns, positive.decoder_rows, positive.teacher) == (2, 0, False)
    hard = plan_of(XPRTLoss(tiny_model, hard_negatives=2), columns=7)  # xprt-hard: the negatives join the pass
    assert (hard.columns, hard.largest_pass) == (9, 7)


def test_plan_of_reads_the_contrastive_loss_inside_retention(tiny_model) -> None:
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from xprt_st.losses import CrossPassageLoss, WithRetention

    cached = plan_of(WithRetention(CrossPassageLoss(tiny_model, hard_negatives=2, mini_batch_size=8)), columns=4)
    assert (cached.columns, cached.largest_pass, cached.teacher, cached.mini_batch_size) == (4, 4, True, 8)
    assert cached.grad_cache and plan_of(CrossPassageLoss(tiny_model), 2).mini_batch_size is None
    other = plan_of(MultipleNegativesRankingLoss(tiny_model), 2)  # no GradCache option to advise
    assert not other.grad_cache and other.mini_batch_size is None
    # GradCache holds 8 groups' graph of the 4 columns, plus every row's output: less than the 64-group pass
    uncut = plan_of(WithRetention(CrossPassageLoss(tiny_model, hard_negatives=2)), columns=4)
    peak = {plan: sum(estimate_step_peak(MINILM, plan, 64, 128).values()) for plan in (cached, uncut)}
    assert peak[cached] < peak[uncut] / 3


def test_plan_of_counts_the_retention_students_own_pass(tiny_model) -> None:
    """Where WithRetention cannot reuse the contrastive pass (masked text; the retention text in its own
    columns, as compare runs have), its student embeds (anchor, positive) once more for the whole batch with
    graph, GradCache or not (tests/losses/test_loss_memory.py counts the rows); the plan holds that pass."""
    from xprt_st.losses import CrossPassageLoss, WithRetention

    def plan(columns: int, **options):
        retention_columns = options.pop("retention_columns", None)
        loss = WithRetention(CrossPassageLoss(tiny_model, **options), retention_columns=retention_columns)
        return plan_of(loss, columns)

    masked = plan(2, encoder_mask_ratio=0.15, mini_batch_size=8)
    assert (masked.columns, masked.largest_pass, masked.uncut_columns) == (4, 2, 2)
    assert plan(2, encoder_mask_ratio=0.15).columns == 4  # without GradCache: the masked pass and the student's
    own_text = plan(6, hard_negatives=2, retention_columns=(4, 5), mini_batch_size=8)  # + 2 retention columns
    assert (own_text.columns, own_text.largest_pass, own_text.uncut_columns) == (6, 4, 2)
    reused = plan(2, mini_batch_size=8)
    assert (reused.columns, reused.uncut_columns) == (2, 0)
    # the student's pass grows with the batch: 4x the groups, 4x its share of the activations
    student = [
        estimate_step_peak(MINILM, masked, batch, 128)["encoder activations"]
        - estimate_step_peak(MINILM, reused, batch, 128)["encoder activations"]
        for batch in (16, 64)
    ]
    assert student[1] == pytest.approx(4 * student[0])
    assert student[0] == pytest.approx(16 * 2 * MINILM.layers * 128 * memory.layer_bytes_per_token(MINILM, 128))


def test_a_gpu_that_will_not_hold_the_batch_gets_one_line_with_the_batch_that_fits(tiny_model, monkeypatch) -> None:
    from xprt_st.losses import XPRTLoss

    loss = XPRTLoss(tiny_model, mini_batch_size=None)
    shape, plan = EncoderShape.of(tiny_model), plan_of(loss, 5)
    free = sum(estimate_step_peak(shape, plan, 24, 128).values()) + 1  # 24 groups fit, 64 do not
    monkeypatch.setattr(memory, "available_bytes", lambda device: free)
    with pytest.raises(StepMemoryError) as raised:
        check_step_memory(tiny_model, loss, 5, 64, 128, "fp32", torch.device("cuda"))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("training.batch_size 64: one step needs about")
    assert "a batch of 24 fits (--batch-size 24" in message and "mini_batch_size" in message
    # the batch that fits passes
    assert check_step_memory(tiny_model, loss, 5, 24, 128, "fp32", torch.device("cuda")) is not None


def test_on_cpu_a_batch_that_will_not_fit_is_a_warning(tiny_model, monkeypatch, caplog) -> None:
    from xprt_st.losses import XPRTLoss

    loss = XPRTLoss(tiny_model)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 0.5 * 2**30)
    with caplog.at_level(logging.INFO, logger="xprt_st.training.memory"):
        parts = check_step_memory(tiny_model, loss, 5, 64, 128, "fp32", torch.device("cpu"))
    assert parts is not None and sum(parts.values()) > 0.5 * 2**30
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "training.batch_size 64" in warnings[0].getMessage()
    assert "RAM available" in warnings[0].getMessage()


def test_padded_length_is_the_longest_sampled_row_within_the_limit(tiny_model) -> None:
    from datasets import Dataset

    tiny_model.max_seq_length = 12
    texts = ["a b", "a b c d e", "a"] * 10
    dataset = Dataset.from_dict({"anchor": texts})
    assert memory.padded_length(tiny_model, dataset, "anchor") == 7  # [CLS] a b c d e [SEP]
    longer = Dataset.from_dict({"anchor": [" ".join(["word"] * 40)]})
    assert memory.padded_length(tiny_model, longer, "anchor") == 12  # cut at max_seq_length


def test_train_names_a_batch_that_will_not_fit_before_the_first_step(tiny_model_path, tmp_path, monkeypatch) -> None:
    from training_helpers import write_mined
    from typer.testing import CliRunner

    from xprt_st.cli import app

    monkeypatch.setattr(memory, "available_bytes", lambda device: 2.0**20)  # 1 MiB of RAM available
    data = write_mined(tmp_path / "mined", n_groups=8)
    output = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["train", "--recipe", "xprt", "--data", str(data), "--output", str(output), "--model", str(tiny_model_path),
         "--max-steps", "1", "--batch-size", "4", "--max-seq-length", "32", "--no-progress", "--logging-steps", "1"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output  # on a CPU it is a warning: the run goes on
    log = (output / "xprt-st.log").read_text(encoding="utf-8")
    warning = log.index("training.batch_size 4: one step needs about")
    assert "GiB of RAM available; not even 2 groups fit" in log
    assert log.index("estimated peak of one step") < warning < log.index("step 1/1: loss=")
