"""The stage table (exclusive wall and CPU seconds, reuse flags) and the progress lines, on fake clocks."""

from __future__ import annotations

import pytest

from xprt_st.progress_lines import Heartbeat
from xprt_st.stage_timing import STARTUP, StageTimer, advance, count_texts, format_rows, mark_reused, stage, timing


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_inner_stages_pause_the_outer_one_and_repeated_names_add_up() -> None:
    wall, cpu = Clock(), Clock()
    timer = StageTimer(wall=wall, cpu=cpu)
    with timing(timer), stage("mine"):
        wall.now, cpu.now = 2.0, 1.0
        for _ in range(2):  # two chunks: one row
            with stage("encode for mining"):
                count_texts(100)
                wall.now += 10.0
                cpu.now += 9.0
        wall.now += 3.0
        with stage("hard negatives"):
            mark_reused()
            wall.now += 1.0
    rows = {row["stage"]: row for row in timer.rows()}
    assert list(rows) == ["mine", "encode for mining", "hard negatives"]
    assert rows["mine"]["wall_s"] == pytest.approx(5.0) and rows["mine"]["cpu_s"] == pytest.approx(1.0)
    assert rows["encode for mining"]["wall_s"] == pytest.approx(20.0)
    assert rows["encode for mining"]["cpu_s"] == pytest.approx(18.0)
    assert rows["hard negatives"]["reused"] and not rows["mine"]["reused"]
    # the texts count where they were encoded: 200 in the encoding's 20 s, none in the outer stage
    assert rows["encode for mining"]["texts"] == 200 and rows["mine"]["texts"] == 0
    cells = format_rows(timer.rows())
    assert [cell[3] for cell in cells[:3]] == ["", "10.0", ""]
    assert cells[-1] == ("total", "26.0", "19.0", "", "")  # the rows add up to the run


def test_without_an_active_timer_stages_cost_nothing_and_record_nothing() -> None:
    timer = StageTimer()
    with stage("train") as row:
        mark_reused()
        advance(3, 10)
    assert row is None and timer.rows() == []


def test_the_rows_count_an_open_stage_up_to_now() -> None:
    wall = Clock()
    timer = StageTimer(wall=wall, cpu=wall)
    with timer.stage("other"):
        wall.now = 7.0
        assert timer.rows()[0]["wall_s"] == pytest.approx(7.0)
        wall.now = 9.0
    assert timer.rows()[0]["wall_s"] == pytest.approx(9.0)


def test_a_progress_line_comes_every_30_seconds_of_a_long_stage_with_how_far_it_is() -> None:
    wall = Clock()
    timer = StageTimer(wall=wall, cpu=wall)
    lines: list[str] = []
    beat = Heartbeat(timer, lines.append, interval=30.0, clock=wall)
    assert beat.poll() is None  # nothing is running
    with timing(timer), stage("train"):
        for second in range(1, 121):  # the thread polls about once a second
            wall.now = float(second)
            advance(second // 4, 30)
            beat.poll()
        with stage("label-free: trained"):  # an inner stage without a count shows the outer one's
            wall.now = 160.0
            beat.poll()
    assert lines == [
        "still working: train, 30 s so far (7/30)",
        "still working: train, 60 s so far (15/30)",
        "still working: train, 90 s so far (22/30)",
        "still working: train, 120 s so far (30/30)",
        "still working: label-free: trained, 40 s so far (30/30)",
    ]
    wall.now = 400.0
    assert beat.poll() is None  # between stages: no line


def test_a_stage_entered_chunk_by_chunk_counts_from_its_first_chunk_and_a_new_one_settles_first() -> None:
    """Before, each chunk's "encode for mining" counted from its own start ("26 s so far", then "15 s so far"), and
    a stage opened a moment after the last line was named at once ("train, 0 s so far")."""
    wall = Clock()
    timer = StageTimer(wall=wall, cpu=wall)
    lines: list[str] = []
    beat = Heartbeat(timer, lines.append, interval=30.0, clock=wall)
    with timing(timer), stage("mine"):
        for _chunk in range(3):  # 20 s of encoding, then 5 s of scoring, per chunk
            with stage("encode for mining"):
                for _ in range(20):
                    wall.now += 1.0
                    beat.poll()
            wall.now += 5.0
        wall.now += 40.0  # (no poll meanwhile)
        with stage("train"):
            wall.now += 1.0
            assert beat.poll() is None  # 56 s since the last line, but train has run 1 s
            wall.now += 5.0
            beat.poll()
    assert lines == [
        "still working: encode for mining, 30 s so far",  # the second chunk, 30 s after the first began
        "still working: encode for mining, 60 s so far",
        "still working: train, 6 s so far",
    ]


def test_the_heartbeat_thread_starts_and_stops() -> None:
    timer = StageTimer()
    lines: list[str] = []
    with Heartbeat(timer, lines.append, interval=30.0) as beat:
        assert beat._thread is not None and beat._thread.is_alive()
    assert not beat._thread.is_alive() and lines == []


def test_progress_lines_are_on_only_for_a_console_that_is_not_a_terminal() -> None:
    import contextlib
    import io

    from rich.console import Console

    from xprt_st.progress_lines import command_progress, heartbeat_for

    timer = StageTimer()
    assert isinstance(heartbeat_for(timer, Console(file=io.StringIO()), True), Heartbeat)  # a log file
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(heartbeat_for(timer, terminal, True), contextlib.nullcontext)
    assert isinstance(heartbeat_for(timer, Console(file=io.StringIO()), False), contextlib.nullcontext)  # -q
    with command_progress("mine", Console(file=io.StringIO()), True) as active, stage("encode for mining"):
        pass
    assert [row["stage"] for row in active.rows()] == ["mine", "encode for mining"]


def test_the_table_counts_the_start_up_before_the_first_stage() -> None:
    """Before: the quickstart's "total" left out the start-up (loading torch and the libraries, the checks): 85% of
    a small run's wall time."""
    import json
    import subprocess
    import sys

    script = (
        "import json, time; time.sleep(0.5); from xprt_st.stage_timing import startup_row as r; print(json.dumps(r()))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    row = json.loads(done.stdout)
    if row is None:
        pytest.skip("no /proc here: the start-up cannot be timed")
    assert row["stage"] == STARTUP and 0.5 <= row["wall_s"] < 60
    from xprt_st.cli.quickstart import stage_table

    rows = [row, {"stage": "train", "wall_s": 1.0, "cpu_s": 1.0, "reused": False}]
    table = stage_table(rows)
    cells = [list(column.cells) for column in table.columns]
    assert cells[0][0] == STARTUP and cells[0][-1] == "total"
    assert cells[1][-1] == f"{row['wall_s'] + 1.0:.1f}"
