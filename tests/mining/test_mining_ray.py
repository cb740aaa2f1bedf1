"""The Ray engine on a local 2-CPU cluster: same groups and figures as the local engine, resume, clear errors.

One cluster serves the whole module (starting one costs about 20 s on a loaded CI machine).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import ray
from typer.testing import CliRunner

from tests.conftest import bbc_sample, debian_sample
from xprt_st.cli import app
from xprt_st.columns import GROUP_COLUMNS, LABEL
from xprt_st.mining import GroupBuilder, MiningConfig, load_heldout
from xprt_st.mining.engines.ray import RayEngine, RayEngineError
from xprt_st.mining.layout import STATS_FILE

TOPICS = ["river", "violin", "glacier", "tax", "comet", "bakery", "chess", "volcano"]
runner = CliRunner()
TIMING = ("encode_seconds",)
"""stats.json figures that measure time, not the result; every other figure must match."""


@pytest.fixture(scope="module")
def local_ray():
    for attempt in range(3):  # Ray gives a local node a fixed 30 s to start; a loaded machine can need more
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, _tiny_model_session):
    """The synthetic corpus and its output from the local engine (the reference), computed once."""
    folder = tmp_path_factory.mktemp("reference")
    corpus = _synthetic_corpus(folder / "corpus")
    stats = GroupBuilder(corpus, folder / "local", _config(), model=_tiny_model_session, progress=False).run()
    assert stats["groups"] > 0 and stats["skipped"] == {"invalid_json": 1, "single_passage": 1}
    return corpus, folder / "local"


def _document(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return "\n\n".join(
        f"The {topic} story part {j} of document {i} mentions {topic} facts, {TOPICS[(i + j) % 8]} and number "
        f"{i * 10 + j}. Experts on the {topic} add more detail about {TOPICS[(i * j) % 8]} history here."
        for j in range(2 + i % 4)
    )


def _synthetic_corpus(folder: Path) -> list[Path]:
    """Two units: a JSONL file (with bad lines) and a Parquet file, so labels must continue across files."""
    folder.mkdir()
    rows = [json.dumps({"text": _document(i), "id": f"a-{i}"}) for i in range(9)]
    rows[3] = "{not json"
    rows[5] = json.dumps({"text": "A single short passage.", "id": "single"})
    (folder / "a.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    import pyarrow as pa

    pq.write_table(
        pa.table({"text": [_document(i) for i in range(9, 17)], "id": [f"b-{i}" for i in range(9, 17)]}),
        folder / "b.parquet",
    )
    return [folder / "a.jsonl", folder / "b.parquet"]


def _config(**overrides) -> MiningConfig:
    settings = {
        "max_tokens": 32,
        "min_tokens": 8,
        "batch_size": 8,
        "chunk_size": 3,  # several chunks, some spanning both files
        "threshold_quantile": 0.5,
        "id_field": "id",
        "holdout": 0.25,  # so every comparison covers the held-out part too
    }
    settings.update(overrides)
    return MiningConfig(**settings)


def _rows(folder: Path) -> list[tuple]:
    dataset = datasets.load_from_disk(str(folder))
    return sorted(tuple(row[c] for c in [*GROUP_COLUMNS, LABEL]) for row in dataset)


def _figures(folder: Path) -> dict:
    stats = json.loads((folder / STATS_FILE).read_text())
    return {k: v for k, v in stats.items() if k not in TIMING}


def _assert_same_output(local: Path, other: Path) -> None:
    assert _rows(other) == _rows(local)
    assert _figures(other) == _figures(local)
    assert (other / "groups_meta.jsonl").read_text() == (local / "groups_meta.jsonl").read_text()
    for part in (0, 1):
        held = [load_heldout(folder)[part].to_pandas().astype(str) for folder in (local, other)]
        assert sorted(map(tuple, held[0].values)) == sorted(map(tuple, held[1].values)) and len(held[0])
    # DataFrame.equals counts NaN == NaN (single-passage documents have no centrality).
    assert (
        pq.read_table(other / "passages.parquet")
        .to_pandas()
        .equals(pq.read_table(local / "passages.parquet").to_pandas())
    )


def test_ray_with_two_workers_matches_the_local_engine(tmp_path, tiny_model, local_ray, reference):
    corpus, local = reference
    engine = RayEngine(
        corpus, tmp_path / "ray", _config(), model=tiny_model, num_workers=2, merge_in_workers=True, progress=False
    )
    ray_stats = engine.run()
    assert sorted(engine.chunks_computed) == list(range(len(engine.chunks_computed)))
    assert len(engine.chunks_computed) > 3
    assert ray_stats["groups"] == json.loads((local / STATS_FILE).read_text())["groups"]
    _assert_same_output(local, tmp_path / "ray")

    # The same corpus in two local shards: one corpus-wide TF-IDF, so the same groups.
    sharded = tmp_path / "sharded"
    GroupBuilder(corpus, sharded, _config(num_shards=2), model=tiny_model, progress=False).run()
    assert _rows(sharded) == _rows(local)
    assert {k: v for k, v in _figures(sharded).items() if k != "settings"} == {
        k: v for k, v in _figures(local).items() if k != "settings"
    }


def _die_on_marker(forward, marker: list[int], once: Path | None = None):
    """A model ``forward`` that kills its worker process when a passage holds the token ids ``marker`` (with
    ``once``, a file it creates: only the first time, so the retried task lives)."""

    def dying(features, **kwargs):
        for row in features["input_ids"].tolist():
            if any(row[i : i + len(marker)] == marker for i in range(len(row))):
                if once is not None:
                    if once.exists():
                        break
                    once.touch()
                time.sleep(2)  # let the other worker finish its chunks first
                os._exit(1)
        return forward(features, **kwargs)

    return dying


def test_a_dying_worker_is_a_clear_error_and_the_rerun_resumes(tmp_path, tiny_model, local_ray, reference):
    corpus, local = reference
    out = tmp_path / "ray"
    dying = type(tiny_model).__new__(type(tiny_model))
    dying.__dict__.update(tiny_model.__dict__)
    marker = tiny_model.tokenizer("document 16", add_special_tokens=False)["input_ids"]
    dying.forward = _die_on_marker(tiny_model.forward, marker)  # the last document: the last chunk
    with pytest.raises(RayEngineError, match=r"worker process died.*rerun the same command to resume"):
        RayEngine(corpus, out, _config(), model=dying, num_workers=2, worker_restarts=0, progress=False).run()
    shard = out / "shards" / "shard-00000-of-00001"
    finished = sorted(int(p.name[-5:]) for p in shard.glob("chunk-[0-9][0-9][0-9][0-9][0-9]"))
    assert finished and not (shard / "COMPLETE").exists()

    engine = RayEngine(corpus, out, _config(), model=tiny_model, num_workers=2, progress=False)
    engine.run()
    total = len(list(shard.glob("chunk-[0-9][0-9][0-9][0-9][0-9]")))
    assert sorted(engine.chunks_computed) == sorted(set(range(total)) - set(finished))  # none re-encoded
    _assert_same_output(local, out)


def test_a_worker_killed_mid_shard_is_retried_and_the_run_equals_a_local_one(
    tmp_path, tiny_model, local_ray, reference
):
    corpus, local = reference
    out = tmp_path / "ray"
    dying = type(tiny_model).__new__(type(tiny_model))
    dying.__dict__.update(tiny_model.__dict__)
    marker = tiny_model.tokenizer("document 16", add_special_tokens=False)["input_ids"]
    died = tmp_path / "died-once"
    dying.forward = _die_on_marker(tiny_model.forward, marker, once=died)
    RayEngine(corpus, out, _config(), model=dying, num_workers=2, worker_restarts=1, progress=False).run()
    assert died.exists()  # a worker process did die in the middle of its shard's chunk
    _assert_same_output(local, out)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_wrong_address_fails_fast_and_says_how_to_fix_it(tmp_path, tiny_model, monkeypatch, tiny_model_path):
    corpus = _synthetic_corpus(tmp_path / "corpus")
    start = time.perf_counter()
    with pytest.raises(RayEngineError, match=r"cannot reach the Ray cluster at '127\.0\.0\.1:\d+'.*ray status"):
        RayEngine(corpus, tmp_path / "out", _config(), model=tiny_model, address=f"127.0.0.1:{_free_port()}").run()
    monkeypatch.setenv("RAY_ADDRESS", "head-node-without-port")
    with pytest.raises(RayEngineError, match="is not HOST:PORT"):
        RayEngine(corpus, tmp_path / "out", _config(), model=tiny_model).run()
    # The CLI reads RAY_ADDRESS too, and reports the problem as an error (exit 2), not a traceback.
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")
    result = runner.invoke(app, ["mine", *map(str, corpus), "-o", str(tmp_path / "out"), "--engine", "ray", "-q"])
    assert result.exit_code == 2 and "cannot reach the Ray cluster" in result.output
    assert time.perf_counter() - start < 30
    assert not (tmp_path / "out").exists()  # nothing was computed
    result = runner.invoke(app, ["mine", *map(str, corpus), "-o", str(tmp_path / "out"), "--engine", "spark"])
    assert result.exit_code == 2 and "'spark' is not one of ['local', 'ray']" in result.output


def test_the_cli_mines_on_ray_with_workers_loading_the_model(tmp_path, tiny_model_path, local_ray, reference):
    corpus, local = reference
    out = tmp_path / "cli"
    options = ["--max-tokens", "32", "--min-tokens", "8", "--encode-batch-size", "8", "--chunk-size", "3"]
    options += ["--threshold-quantile", "0.5", "--id-field", "id", "--mining-model", str(tiny_model_path), "-q"]
    options += ["--holdout", "0.25"]
    result = runner.invoke(app, ["mine", *map(str, corpus), "-o", str(out), "--engine", "ray", *options])
    assert result.exit_code == 0, result.output
    assert "xPRT mining summary" in result.output
    assert _figures(out)["groups"] == _figures(local)["groups"]


@pytest.mark.parametrize("corpus_name", ["bbc", "debian"])
def test_real_corpora_mine_to_the_same_groups_on_ray(tmp_path, tiny_model, local_ray, corpus_name):
    if corpus_name == "bbc":
        corpus, config = bbc_sample(tmp_path, 20), _config(id_field=None, chunk_size=6)
    else:
        corpus, config = debian_sample(tmp_path, 10), _config(html=True, chunk_size=3, max_passages=40)
    local = tmp_path / "local"
    stats = GroupBuilder([corpus], local, config, model=tiny_model, progress=False).run()
    assert stats["groups"] > 0
    RayEngine([corpus], tmp_path / "ray", config, model=tiny_model, num_workers=2, progress=False).run()
    _assert_same_output(local, tmp_path / "ray")


def test_without_ray_installed_the_error_gives_the_install_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets when Ray is not installed
    corpus = _synthetic_corpus(tmp_path / "corpus")
    with pytest.raises(RayEngineError, match=r'pip install "xprt-st\[ray\]"'):
        RayEngine(corpus, tmp_path / "out", _config()).run()
    assert not (tmp_path / "out").exists()


def test_chunks_are_the_local_engines_and_may_span_input_units():
    from xprt_st.mining.engines.ray import chunk_plan
    from xprt_st.mining.stats import sum_counts

    units = [{"documents_with_passages": 4}, {"documents_with_passages": 0}, {"documents_with_passages": 5}]
    assert chunk_plan(units, 3) == [[(0, 0, 3)], [(0, 3, 4), (2, 0, 2)], [(2, 2, 5)]]
    assert chunk_plan([{"documents_with_passages": 0}], 3) == [[]]  # one empty chunk, as the local engine
    counts = [
        {"documents": 4, "skipped": {"empty": 1}, "repairs": {}, "text_fields": {"text": 3}},
        {"documents": 2, "skipped": {"empty": 1, "invalid_json": 1}, "repairs": {"decoded_latin1": 1}},
    ]
    assert sum_counts(counts) == {
        "documents": 6,
        "skipped": {"empty": 2, "invalid_json": 1},
        "repairs": {"decoded_latin1": 1},
        "text_fields": {"text": 3},
    }
