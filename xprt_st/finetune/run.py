"""finetune-compare's edges: fine-tune a copy with MNRL, pre-train from a recipe, and the end-to-end comparison."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentence_transformers import SentenceTransformer

from xprt_st.evaluation.readers import BEIRData
from xprt_st.evaluation.tasks import make_retrieval_task
from xprt_st.finetune.folds import FinetuneInputError, LabelledPair, plan_folds, restrict_queries
from xprt_st.finetune.gains import ROLES, compare_gains, domain_counts, domain_means, gain_intervals
from xprt_st.finetune.result import FinetuneResult, FinetuneSettings

if TYPE_CHECKING:
    from xprt_st.output_folder import OutputFolder

logger = logging.getLogger(__name__)


def finetune(
    model: SentenceTransformer,
    pairs: Sequence[LabelledPair],
    settings: FinetuneSettings,
    output_dir: str | Path,
) -> SentenceTransformer:
    """Fine-tune a deep copy of ``model`` on (query, positive) pairs with MultipleNegativesRankingLoss.

    The copy is trained and returned; ``model`` is left untouched. Batches never hold two identical
    texts (the NO_DUPLICATES sampler) so an in-batch negative is never a copy of the positive.
    """
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from xprt_st.training.progress import LogLinesCallback

    if not pairs:
        raise FinetuneInputError("no training pairs to fine-tune on")
    set_seed(settings.seed)
    student = copy.deepcopy(model)
    dataset = Dataset.from_dict({"anchor": [p.query for p in pairs], "positive": [p.positive for p in pairs]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        # transformers >= 5 reads a float warmup_steps in [0, 1) as a share of the steps; warmup_ratio is deprecated
        warmup_steps=settings.warmup_ratio,
        seed=settings.seed,
        data_seed=settings.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, len(pairs) // settings.batch_size // 5),
        disable_tqdm=True,
        bf16=settings.precision == "bf16",
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = SentenceTransformerTrainer(
        model=student,
        args=args,
        train_dataset=dataset,
        loss=MultipleNegativesRankingLoss(student, scale=settings.scale),
        callbacks=[LogLinesCallback()],  # log lines, not the raw dicts PrinterCallback prints on stdout
    )
    # disable_tqdm makes transformers print every log dict to stdout; the comparison reports its own tables
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    return student


def finetune_compare(
    base: str | Path | SentenceTransformer | None,
    pretrained: str | Path | SentenceTransformer,
    data: BEIRData,
    *,
    task: str = "task",
    ignore_identical_ids: bool = False,
    train_pairs: Sequence[LabelledPair] | None = None,
    test_fraction: float = 0.5,
    domains: Mapping[str, str] | None = None,
    settings: FinetuneSettings | None = None,
    output_dir: str | Path = "xprt-finetune",
    save_models: bool = False,
    eval_batch_size: int = 64,
    device: str | None = None,
    tolerance: float = 0.0,
) -> FinetuneResult:
    """Fine-tune base and pre-trained models identically and compare the four on held-out queries.

    Args:
        base: the starting model (name, folder, loaded model; None = the offline default).
        pretrained: the model after (xPRT) continued pre-training from ``base``.
        data: the retrieval task (test judgements; also the source of train pairs without ``train_pairs``).
        task: its name in tables.
        ignore_identical_ids: never count a document whose id is the query's (ArguAna).
        train_pairs: labelled pairs; None splits ``data``'s queries into folds (:func:`plan_folds`).
        test_fraction: share of queries in the test fold when splitting.
        domains: query id -> sub-domain (see :func:`query_domains`); None = overall only.
        settings: fine-tuning settings, identical for both models.
        output_dir: trainer scratch space and, with ``save_models``, the two fine-tuned models.
        save_models: also save the two fine-tuned models under ``output_dir``.
        eval_batch_size: encoding batch size of the evaluations.
        device: torch device for models loaded here.
        tolerance: a gain below ``-tolerance`` is flagged.
    """
    from xprt_st.evaluation.run import evaluate_model, model_label
    from xprt_st.models import load_model
    from xprt_st.precision import use_precision

    settings = settings or FinetuneSettings()
    output_dir = Path(output_dir)
    domains = dict(domains or {})
    plan, pairs = plan_folds(
        data, train_pairs=train_pairs, test_fraction=test_fraction, seed=settings.seed, domains=domains
    )
    settings.check_pairs(len(pairs), plan.source)
    logger.info(
        "folds (%s): %d train queries, %d test queries, %d train pairs",
        plan.source,
        len(plan.train_query_ids),
        len(plan.test_query_ids),
        len(pairs),
    )
    test_task = make_retrieval_task(
        restrict_queries(data, plan.test_query_ids), f"{task}-test", ignore_identical_ids=ignore_identical_ids
    )
    loaded = {
        role: spec if isinstance(spec, SentenceTransformer) else load_model(spec, device=device)
        for role, spec in (("base", base), ("pretrained", pretrained))
    }
    lengths = {role: model.max_seq_length for role, model in loaded.items()}
    if lengths["base"] != lengths["pretrained"]:
        # the same texts must reach both models: score (and fine-tune) the pre-trained one at the base's limit
        logger.warning(
            "the pre-trained model reads %s tokens and the base %s: both are fine-tuned and scored at %s",
            lengths["pretrained"],
            lengths["base"],
            lengths["base"],
        )
        loaded["pretrained"].max_seq_length = lengths["base"]
    names = {"base": model_label(base), "pretrained": model_label(pretrained)}
    names.update({"base+ft": f"{names['base']}+ft", "pretrained+ft": f"{names['pretrained']}+ft"})
    for role in ("base", "pretrained"):
        loaded[f"{role}+ft"] = finetune(loaded[role], pairs, settings, output_dir / f"trainer-{role}")
        if save_models:
            loaded[f"{role}+ft"].save(str(output_dir / f"{role}+ft"))
    per_query: dict[str, dict[str, float]] = {}
    for role in ROLES:
        use_precision(loaded[role], settings.precision)
        _, values = evaluate_model(loaded[role], [test_task], label=role, batch_size=eval_batch_size, cache_dir=None)
        per_query[role] = values[f"{task}-test"]
    scores = {role: domain_means(per_query[role], domains) for role in ROLES}
    counts = domain_counts(plan.test_query_ids, domains)
    rows = compare_gains(scores, counts, tolerance=tolerance, intervals=gain_intervals(per_query, domains))
    return FinetuneResult(task=task, plan=plan, settings=settings, models=names, rows=rows, per_query=per_query)


@dataclass(frozen=True)
class FinetuneCompareConfig:
    """What ``xprt-st finetune-compare`` compares: ``base`` and a ``pretrained`` model (or the one ``recipe`` pre-trains
    from ``base`` on ``mined``), fine-tuned alike on ``task``'s labelled pairs, into ``output_dir``.

    Made from the command's flags of the same names; the fine-tuning itself is a :class:`FinetuneSettings`.
    """

    pretrained: str | None = None
    base: str = "default"
    task: str = "python-faq"
    """python-faq, arguana (in ``data_dir``), or a BEIR folder."""
    data_dir: Path | None = None
    train_pairs: Path | None = None
    """Labelled pairs (JSONL or TSV); then every task query is a test query."""
    train_split: str | None = None
    """``qrels/<SPLIT>.tsv`` of the task folder as training judgements."""
    query_field: str = "query"
    positive_field: str = "positive"
    test_fraction: float = 0.5
    domain_field: str | None = None
    domain_pattern: str | None = None
    recipe: str | None = None
    mined: Path | None = None
    pretrain_set: tuple[str, ...] = ()
    """``KEY=VALUE`` overrides of ``recipe``."""
    max_queries: int | None = None
    max_corpus: int | None = None
    seed: int = 0
    """Of the folds and the subsampling (the fine-tuning's is :attr:`FinetuneSettings.seed`)."""
    tolerance: float = 0.0
    output_dir: Path = Path("xprt-finetune")
    save_models: bool = False
    device: str | None = None

    def overrides(self) -> dict[str, Any]:
        """``pretrain_set`` as recipe overrides, each value read as YAML.

        Raises:
            FinetuneInputError: an item without ``=``.
        """
        import yaml

        overrides = {}
        for item in self.pretrain_set:
            key, sep, value = item.partition("=")
            if not sep:
                raise FinetuneInputError(f"--pretrain-set expects KEY=VALUE, got {item!r}")
            overrides[key.strip()] = yaml.safe_load(value)
        return overrides


def _silent(line: str) -> None:
    del line


def run_finetune_compare(
    config: FinetuneCompareConfig,
    settings: FinetuneSettings,
    folder: OutputFolder,
    *,
    progress: bool = False,
    say: Callable[[str], None] = _silent,
) -> FinetuneResult:
    """Check the inputs, pre-train with ``config.recipe`` when asked (reusing, resuming or refusing
    ``OUTPUT/pretrained`` by its fingerprint), then :func:`finetune_compare`; ``folder`` is the held output folder.

    Every input is checked, the folds' pair count included, before any model loads or pre-training starts.

    Raises:
        FinetuneInputError: a bad combination of inputs, too few pairs, or a pre-trained model of other settings.
    """
    from xprt_st.evaluation.catalog import resolve_beir
    from xprt_st.evaluation.readers import read_beir_folder, subsample_beir
    from xprt_st.finetune.folds import beir_train_pairs, query_domains, read_pairs
    from xprt_st.finetune.pretrained import PRETRAINED, PretrainSettings, pretrained_stage
    from xprt_st.pipeline import Action, run_pipeline
    from xprt_st.pipeline import plan as stage_actions

    if config.train_pairs is not None and config.train_split is not None:
        raise FinetuneInputError("give either --train-pairs or --train-split, not both")
    if (config.pretrained is None) == (config.recipe is None):
        raise FinetuneInputError(
            "give either --pretrained MODEL, or --recipe RECIPE with --mined FOLDER to pre-train BASE"
        )
    if config.recipe is not None and config.mined is None:
        raise FinetuneInputError("--recipe needs --mined, the folder written by xprt-st mine from your corpus")
    overrides = config.overrides()
    recipe, mined, base = config.recipe, config.mined, config.base
    stage = None
    if recipe is not None and mined is not None:
        stage = pretrained_stage(PretrainSettings(recipe, mined, base, overrides), folder, progress)
        stage.check()
        stage_actions([stage], folder.path)  # a model of other settings, or one that records none: refused here
    data, label, ignore_identical_ids = resolve_beir(config.task, config.data_dir)
    data = subsample_beir(data, max_queries=config.max_queries, max_corpus=config.max_corpus, seed=config.seed)
    domains = query_domains(data, domain_field=config.domain_field, domain_pattern=config.domain_pattern)
    pairs = None
    if config.train_pairs is not None:
        pairs = read_pairs(config.train_pairs, query_field=config.query_field, positive_field=config.positive_field)
    elif config.train_split is not None:
        if not Path(config.task).is_dir():
            raise FinetuneInputError("--train-split needs --task to be a BEIR folder that holds qrels/<split>.tsv")
        pairs = beir_train_pairs(read_beir_folder(Path(config.task), config.train_split))
    if pairs is None:  # the folds' own count, before pre-training and before any model loads
        plan, split_pairs = plan_folds(data, test_fraction=config.test_fraction, seed=config.seed)
        settings.check_pairs(len(split_pairs), plan.source)
    else:
        source = f"--train-pairs {config.train_pairs}" if config.train_pairs else f"--train-split {config.train_split}"
        settings.check_pairs(len(pairs), source)
    pretrained = config.pretrained
    if stage is not None:
        (row,) = run_pipeline([stage], folder.path)
        pretrained = str(folder.path / PRETRAINED)
        if row.action is Action.REUSE or stage.outcome == "kept":
            say(f"reusing the model pre-trained in {pretrained} (same recipe, overrides, mined folder and --model)")
    assert pretrained is not None  # one of --pretrained and --recipe, checked above
    return finetune_compare(
        base,
        pretrained,
        data,
        task=label,
        ignore_identical_ids=ignore_identical_ids,
        train_pairs=pairs,
        test_fraction=config.test_fraction,
        domains=domains if (config.domain_field or config.domain_pattern) else None,
        settings=settings,
        output_dir=config.output_dir,
        save_models=config.save_models,
        device=config.device,
        tolerance=config.tolerance,
    )
