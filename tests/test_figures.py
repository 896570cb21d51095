"""The figures in the build cache: a figure is redrawn only when something it depends on
changed.

:func:`kvqueue.report.figures.draw` keys each figure on the processed tables its
:class:`~kvqueue.report.figures.FigureSpec` lists; the slow test checks each list
against the committed data (the figure drawn with every other table emptied is the
same PNG), so a figure that reads an unlisted table fails here instead of going stale.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from kvqueue import plotstyle, schema
from kvqueue.params.report_params import ReportSettings
from kvqueue.policy import policy_present
from kvqueue.processed import store
from kvqueue.report import build_cache, figures, processed_build

REPO_ROOT = Path(__file__).resolve().parent.parent


def _empty_data(**tables: pd.DataFrame) -> store.Processed:
    frames = {name: pd.DataFrame(columns=list(spec)) for name, spec in store.TABLES.items()}
    frames.update(tables)
    return store.Processed(ReportSettings(), **frames)


def _figure(text: str) -> Figure:
    fig = Figure(figsize=(2, 1), dpi=50)
    fig.text(0.5, 0.5, text)
    return fig


def test_cached_figure_is_drawn_once_per_key(tmp_path: Path) -> None:
    calls: list[str] = []

    def make(text: str) -> Figure:
        calls.append(text)
        return _figure(text)

    data = dataclasses.replace(_empty_data(), folder=tmp_path / "processed")
    first = figures.cached(data, "demo", (), tmp_path / "a", lambda: make("one"))
    again = figures.cached(data, "demo", (), tmp_path / "b", lambda: make("two"))
    assert calls == ["one"]  # the second call copied the cached PNG
    assert first.read_bytes() == again.read_bytes()
    other = figures.cached(data, "demo", (), tmp_path / "c", lambda: make("three"), extra="x")
    assert calls == ["one", "three"]
    assert other.read_bytes() != first.read_bytes()
    home = tmp_path / "processed" / build_cache.FOLDER
    assert len(list(home.glob("demo-*.png"))) == 2 and not list(home.glob(".*"))
    # Tables made in memory (no processed folder) are drawn every time.
    figures.cached(_empty_data(), "demo", (), tmp_path / "d", lambda: make("four"))
    assert calls == ["one", "three", "four"]


def test_cache_keeps_a_bounded_number_per_name(tmp_path: Path) -> None:
    data = dataclasses.replace(_empty_data(), folder=tmp_path / "processed")
    for k in range(build_cache.KEEP + 3):
        figures.cached(data, "demo", (), tmp_path / "out", lambda k=k: _figure(str(k)), str(k))
    home = tmp_path / "processed" / build_cache.FOLDER
    assert len(list(home.glob("demo-*.png"))) == build_cache.KEEP


def test_figure_key_follows_its_tables_and_settings() -> None:
    policy = pd.DataFrame(
        {c: ["x"] if c in ("host", "run_id") else [None] for c in store.TABLES["policy"]}
    )
    data = _empty_data(policy=policy)
    key = figures.figure_key(data, "policy", ("policy",))
    assert key == figures.figure_key(_empty_data(policy=policy.copy()), "policy", ("policy",))
    changed = policy.assign(run_id=["y"])
    assert key != figures.figure_key(_empty_data(policy=changed), "policy", ("policy",))
    # A table the figure does not read does not change its key; the settings do.
    runs = pd.DataFrame({c: ["z"] for c in store.TABLES["runs"]})
    assert key == figures.figure_key(_empty_data(policy=policy, runs=runs), "policy", ("policy",))
    other = dataclasses.replace(data, settings=ReportSettings(seed=data.settings.seed + 1))
    assert key != figures.figure_key(other, "policy", ("policy",))
    assert key != figures.figure_key(data, "policy", ("policy",), extra="cases")


@pytest.mark.slow
def test_each_figure_reads_only_the_tables_it_lists(tmp_path: Path) -> None:
    data = processed_build.build(
        REPO_ROOT / "data" / "raw", tmp_path / "processed", ReportSettings()
    )
    kinds = set(data.ledger["kind"])
    assert {schema.KIND_BENCH, schema.KIND_HISTORY, schema.KIND_POLICY} <= kinds
    for name, spec in figures.FIGURES.items():
        full = figures.save(spec.draw(data), tmp_path / "full", name).read_bytes()
        emptied = {
            table: data.table(table).iloc[0:0] for table in store.TABLES if table not in spec.tables
        }
        alone = dataclasses.replace(data, **emptied)
        drawn = figures.save(spec.draw(alone), tmp_path / "alone", name).read_bytes()
        assert drawn == full, f"figure {name} reads a table its FigureSpec does not list"


def test_interval_plots_draw_the_given_intervals() -> None:
    """seaborn draws the estimates and intervals of the table, not its own."""
    sns = plotstyle.seaborn()
    df = pd.DataFrame(
        {
            "cell": ["a", "b", "a", "b"],
            "series": ["s", "s", "t", "t"],
            "est": [1.0, 2.0, 3.0, 4.0],
            "low": [0.5, 0.0, 2.5, 1.0],  # not symmetric, and not what seaborn would compute
            "high": [1.1, 9.0, 3.2, 4.5],
        }
    )
    ax = Figure().subplots()
    sns.pointplot(
        data=plotstyle.given_intervals(df, "est", "low", "high", scale=10),
        x="value",
        y="cell",
        hue="series",
        order=["a", "b"],
        estimator=plotstyle.given_estimate,
        errorbar=plotstyle.given_interval,
        linestyle="none",
        ax=ax,
    )
    points = [ln for ln in ax.lines if ln.get_marker() not in ("None", None, "")]
    assert sorted(x for ln in points for x in ln.get_xdata()) == [10.0, 20.0, 30.0, 40.0]
    spans = sorted(
        (float(np.nanmin(ln.get_xdata())), float(np.nanmax(ln.get_xdata())))
        for ln in ax.lines
        if ln not in points
    )
    assert spans == [(0.0, 90.0), (5.0, 11.0), (10.0, 45.0), (25.0, 32.0)]


def test_a_point_given_twice_is_refused() -> None:
    rows = plotstyle.given_intervals(
        pd.DataFrame({"est": [1.0, 2.0], "low": [0.0, 1.0], "high": [2.0, 3.0]}),
        "est",
        "low",
        "high",
    )
    assert list(rows["value"]) == [0.0, 1.0, 1.0, 2.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="twice"):
        plotstyle.given_estimate(rows["value"])


def test_drawing_leaves_the_rc_params_as_they_were() -> None:
    before = dict(matplotlib.rcParams)
    policy_present.figure(pd.DataFrame(columns=list(store.TABLES["policy"])))
    assert dict(matplotlib.rcParams) == before


def test_forest_draws_a_point_without_ci_hollow() -> None:
    spec = store.TABLES["summary"]
    row = {c: None for c in spec} | {
        "host": "h",
        "interpreter": "CPython 3.12.1",
        "run_id": "r",
        "phase": "main",
        "case": "alloc1",
        "pool": 2048,
        "candidate": "kvqueue",
        "baseline": "vllm==0.32.0",
        "kind": "pair",
        "headline": True,
    }
    summary = pd.DataFrame(
        [
            row | {"reduction": 0.2, "ci_low": 0.15, "ci_high": 0.25},
            row | {"case": "mix", "reduction": -0.05, "ci_low": np.nan, "ci_high": np.nan},
        ]
    )
    fig = figures.forest(_empty_data(summary=summary))
    ax = fig.axes[0]
    hollow = [ln for ln in ax.lines if ln.get_markerfacecolor() == "white"]
    assert [list(ln.get_xdata()) for ln in hollow] == [[pytest.approx(-5.0)]]
    assert [list(ln.get_ydata()) for ln in hollow] == [[1.0]]  # mix, below alloc1
    assert "hollow: no CI" in fig.legends[0].get_title().get_text()


@pytest.mark.slow
def test_processes_that_do_not_draw_do_not_import_seaborn() -> None:
    """Importing seaborn took 2.8 s (kvqueue.plotstyle): the report's own process
    (processed stage), the analysis and a figure cache lookup do without it."""
    code = (
        "import sys, pandas as pd\n"
        "import kvqueue.report.build, kvqueue.report.processed_build\n"
        "import kvqueue.policy.policy_analysis, kvqueue.history.history_analysis\n"
        "import kvqueue.ab.ab_analysis\n"
        "from kvqueue.params.report_params import ReportSettings\n"
        "from kvqueue.processed import store\n"
        "from kvqueue.report import figures\n"
        "frames = {n: pd.DataFrame(columns=list(s)) for n, s in store.TABLES.items()}\n"
        "figures.figure_key(store.Processed(ReportSettings(), **frames), 'forest', ('summary',))\n"
        "assert 'seaborn' not in sys.modules, 'seaborn imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_dead_writers_partial_entry_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    home = tmp_path / build_cache.FOLDER
    home.mkdir()
    dead = home / f"{build_cache.PARTIAL}{2**22 + 12345}-forest-abc123.tmp"  # never alive
    live = home / f"{build_cache.PARTIAL}{os.getpid()}-run-host-20261129T100000Z-xyz_9.tmp"
    for partial in (dead, live):
        partial.write_bytes(b"half a PNG")
    build_cache.remove_partials(home)
    assert not dead.exists() and live.exists()
    build_cache.remove_partials(tmp_path / "missing")  # no cache yet: nothing to do
