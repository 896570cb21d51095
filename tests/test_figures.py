"""The figure cache: a figure is redrawn only when something it depends on changed.

:func:`kvqueue.report.figures.draw` keys each figure on the processed tables its
:class:`~kvqueue.report.figures.FigureSpec` lists; the slow test checks each list
against the committed data (the figure drawn with every other table emptied is the
same PNG), so a figure that reads an unlisted table fails here instead of going stale.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from kvqueue import schema
from kvqueue.params.report import ReportSettings
from kvqueue.report import figures, processed

REPO_ROOT = Path(__file__).resolve().parent.parent


def _empty_data(**tables: pd.DataFrame) -> processed.Processed:
    frames = {name: pd.DataFrame(columns=list(spec)) for name, spec in processed.TABLES.items()}
    frames.update(tables)
    return processed.Processed(ReportSettings(), **frames)


def _figure(text: str) -> Figure:
    fig = Figure(figsize=(2, 1), dpi=50)
    fig.text(0.5, 0.5, text)
    return fig


def test_cached_figure_is_drawn_once_per_key(tmp_path: Path) -> None:
    calls: list[str] = []

    def make(text: str) -> Figure:
        calls.append(text)
        return _figure(text)

    cache = tmp_path / "cache"
    first = figures.cached("k1", tmp_path / "a", "demo", lambda: make("one"), cache=cache)
    again = figures.cached("k1", tmp_path / "b", "demo", lambda: make("two"), cache=cache)
    assert calls == ["one"]  # the second call copied the cached PNG
    assert first.read_bytes() == again.read_bytes()
    other = figures.cached("k2", tmp_path / "c", "demo", lambda: make("three"), cache=cache)
    assert calls == ["one", "three"]
    assert other.read_bytes() != first.read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == ["demo-k1.png", "demo-k2.png"]


def test_cache_keeps_a_bounded_number_per_name(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for k in range(figures._CACHE_KEEP + 3):
        figures.cached(f"k{k}", tmp_path / "out", "demo", lambda k=k: _figure(str(k)), cache=cache)
    assert len(list(cache.glob("demo-*.png"))) == figures._CACHE_KEEP


def test_figure_key_follows_its_tables_and_settings() -> None:
    policy = pd.DataFrame(
        {c: ["x"] if c in ("host", "run_id") else [None] for c in processed.TABLES["policy"]}
    )
    data = _empty_data(policy=policy)
    key = figures.figure_key(data, "policy", ("policy",))
    assert key == figures.figure_key(_empty_data(policy=policy.copy()), "policy", ("policy",))
    changed = policy.assign(run_id=["y"])
    assert key != figures.figure_key(_empty_data(policy=changed), "policy", ("policy",))
    # A table the figure does not read does not change its key; the settings do.
    runs = pd.DataFrame({c: ["z"] for c in processed.TABLES["runs"]})
    assert key == figures.figure_key(_empty_data(policy=policy, runs=runs), "policy", ("policy",))
    other = dataclasses.replace(data, settings=ReportSettings(seed=data.settings.seed + 1))
    assert key != figures.figure_key(other, "policy", ("policy",))
    assert key != figures.figure_key(data, "policy", ("policy",), extra="cases")


@pytest.mark.slow
def test_each_figure_reads_only_the_tables_it_lists(tmp_path: Path) -> None:
    data = processed.build(REPO_ROOT / "data" / "raw", tmp_path / "processed", ReportSettings())
    kinds = set(data.ledger["kind"])
    assert {schema.KIND_BENCH, schema.KIND_HISTORY, schema.KIND_POLICY} <= kinds
    for name, spec in figures.FIGURES.items():
        full = figures.save(spec.draw(data), tmp_path / "full", name).read_bytes()
        emptied = {
            table: data.table(table).iloc[0:0]
            for table in processed.TABLES
            if table not in spec.tables
        }
        alone = dataclasses.replace(data, **emptied)
        drawn = figures.save(spec.draw(alone), tmp_path / "alone", name).read_bytes()
        assert drawn == full, f"figure {name} reads a table its FigureSpec does not list"
