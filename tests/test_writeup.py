"""The report's structure (kvqueue.report.sections) and the PR writeup rendered from it.

Sizes are checked on synthetic runs of the full protocol (tests/synthetic.py
``write_hosts``): the part of ``pr-writeup.md`` outside ``<details>`` stays within 8,000
characters for one host x four interpreters, and the whole file within 60,000 for four
hosts x four interpreters x three comparisons (GitHub refuses a PR description above
65,536) -- with every table it carries complete.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic import PYTHONS, THIRD_PAIR, write_fixture, write_hosts

from kvqueue import formatting
from kvqueue.params import report as report_params
from kvqueue.report import figures, frames, html, processed, provenance, sections, writeup

FAST = report_params.ReportSettings(resamples=2000)
VISIBLE_BUDGET = 8_000
WHOLE_BUDGET = 60_000
FIGURE_FILES = {name: Path(f"/r/figures/{name}.png") for name in figures.FIGURES}


def _writeup(data: processed.Processed) -> str:
    return writeup.pr_writeup(data, FIGURE_FILES)


@pytest.fixture(scope="module")
def one_host(tmp_path_factory: pytest.TempPathFactory) -> processed.Processed:
    """One host x four interpreters, two comparisons: the shape of the committed data."""
    root = tmp_path_factory.mktemp("one-host")
    write_hosts(root / "raw", hosts=1)
    return processed.build(
        root / "raw", root / "processed", report_params.ReportSettings(resamples=500)
    )


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory: pytest.TempPathFactory) -> processed.Processed:
    root = tmp_path_factory.mktemp("fixture")
    write_fixture(root / "raw", tiny=True)
    return processed.build(root / "raw", root / "processed", FAST)


# ---------------------------------------------------------------------------------------
# budgets


def test_visible_part_within_budget_one_host(one_host: processed.Processed) -> None:
    md = _writeup(one_host)
    visible = writeup.visible_part(md)
    assert len(visible) <= VISIBLE_BUDGET, len(visible)
    assert "<details>" not in visible and md.count("<details>") == md.count("</details>")
    # What a PR reader sees: the answer, validation, environment, commands.
    for heading in ("### Summary", "### Validation", "### Environment", "### Reproduce"):
        assert heading in visible
    assert "**Gate.**" in visible and "**Noise floor.**" in visible
    assert "**Order effect.**" in visible
    assert visible.count("- **synth-host-1**:") == 1  # one line of environment per host
    assert "make bench HOST=synth-host-1" in visible


@pytest.mark.slow
def test_whole_writeup_within_budget_four_hosts_three_comparisons(tmp_path: Path) -> None:
    write_hosts(tmp_path / "raw", hosts=4)
    settings = report_params.ReportSettings(
        pairs=(*report_params.DEFAULT_PAIRS, THIRD_PAIR), resamples=200
    )
    data = processed.build(tmp_path / "raw", tmp_path / "processed", settings)
    md = _writeup(data)
    assert len(md) <= WHOLE_BUDGET, len(md)
    # Reached without cutting a table: every table the writeup carries is there whole.
    carried = [s for s in sections.build(data) if s.writeup and s.table is not None]
    assert carried
    for section in carried:
        assert frames.to_markdown(section.table) in md, section.key
    cells = 4 * len(PYTHONS) * 3  # host x interpreter x comparison
    grid = next(s for s in carried if s.key == "results")
    assert grid.rows == cells
    assert len(grid.table.columns) == 3 + 3 * 2  # comparison, host, python; case x pool
    # The summary shows every comparison x headline case, one column per host.
    summary = next(s for s in carried if s.key == "summary")
    assert summary.rows == 3 * 3
    assert [c for c in summary.table.columns if c.startswith("synth-host-")] == [
        f"synth-host-{h}" for h in range(1, 5)
    ]
    # Left-out detail is named, never dropped silently.
    assert "Only in `reports/report.html`" in md


# ---------------------------------------------------------------------------------------
# one structure, two renderings


def test_sections_open_with_the_answer(fixture_data: processed.Processed) -> None:
    secs = sections.build(fixture_data)
    keys = [s.key for s in secs]
    assert keys[:4] == ["title", "summary", "forest", "results"]
    assert all(s.summary for s in secs[:3]) and not any(s.summary for s in secs[3:])
    assert secs[2].figure == "forest"
    # Provenance comes last; every long table is folded.
    assert keys[-1] == "runs"
    for s in secs:
        if s.table is not None and s.key not in ("summary", "results"):
            assert s.fold, s.key
    assert all(s.figure is None or s.figure in figures.FIGURES for s in secs)


def test_html_and_markdown_render_the_same_sections(fixture_data: processed.Processed) -> None:
    secs = sections.build(fixture_data)
    md = _writeup(fixture_data)
    page = "\n".join(html.section_html(s) for s in secs)
    positions_md = [md.index(s.title) for s in secs if s.writeup]
    assert positions_md == sorted(positions_md)
    positions_html = [page.index(f'id="{s.key}"') for s in secs]
    assert positions_html == sorted(positions_html)
    for s in secs:
        if s.table is not None and not s.table.empty:
            assert frames.to_html(s.table) in page, s.key
            if s.writeup:
                assert frames.to_markdown(s.table) in md, s.key
    # A section left out of the writeup is named there.
    left = [s for s in secs if not s.writeup]
    assert left
    tail = md[md.index("Only in `reports/report.html`") :]
    for s in left:
        assert s.title in tail


def test_figures_are_files_with_alt_text(fixture_data: processed.Processed) -> None:
    md = _writeup(fixture_data)
    for name in ("forest", "process_ratios"):
        assert f"![{figures.FIGURES[name].alt}](figures/{name}.png)" in md
    assert "forest.png" in writeup.visible_part(md)
    # Without figure files there is no dangling link.
    assert "](figures/" not in writeup.pr_writeup(fixture_data)


def test_writeup_content(fixture_data: processed.Processed) -> None:
    md = _writeup(fixture_data)
    assert md.startswith("<!--") and "\n## FreeKVCacheBlockQueue benchmark\n" in md
    assert re.search(
        r"\| vllm==0\.32\.0 vs vllm==0\.31\.0 \| synth-a \| CPython 3\.12\.1 \| "
        r"\d+\.\d% \[\d+\.\d, \d+\.\d\] faster \|",
        md,
    )
    assert "make bench HOST=synth-a" in md and "AA=1" in md
    assert "10,000 resamples" not in md  # FAST settings: the real number is printed
    assert "2,000 resamples" in md
    # Runs left out are named in the provenance.
    assert "20261129T120000Z-cp312-cccc (status interrupted)" in md


# ---------------------------------------------------------------------------------------
# intervals: one formatter


def test_interval_formatting_is_one_helper() -> None:
    assert formatting.fmt_ci(0.189, 0.21) == "[18.9, 21.0]"
    assert formatting.fmt_ci(np.nan, np.nan) == "n/a"
    assert formatting.fmt_ci(0.1, np.nan) == "n/a"
    assert formatting.fmt_ci(None, pd.NA) == "n/a"  # type: ignore[arg-type]
    assert formatting.fmt_estimate(0.203, 0.195, 0.213) == "20.3% [19.5, 21.3]"
    assert formatting.fmt_estimate(0.203, np.nan, np.nan) == "20.3% (CI n/a)"
    assert formatting.fmt_estimate(np.nan, np.nan, np.nan) == "n/a"
    assert formatting.fmt_pct(-0.0004) == "0.0%"


def test_missing_interval_reads_na_everywhere(fixture_data: processed.Processed) -> None:
    # No CI (as with fewer than stats.MIN_PROCESSES processes) in every comparison cell.
    summary = fixture_data.summary.assign(ci_low=np.nan, ci_high=np.nan, aa_half_width=np.nan)
    data = dataclasses.replace(fixture_data, summary=summary)
    md = _writeup(data)
    assert not re.search(r"\bnan\b", md, re.I), re.findall(r".{40}\bnan\b.{20}", md, re.I)
    assert "(CI n/a)" in md
    page = "\n".join(html.section_html(s) for s in sections.build(data))
    assert not re.search(r"\bnan\b", page, re.I), re.findall(r".{40}\bnan\b.{20}", page, re.I)
    assert "(CI n/a)" in page and ">n/a<" in page  # summary/grid cells; CI columns


# ---------------------------------------------------------------------------------------
# the runs table is generic


def test_runs_table_shows_columns_added_later(fixture_data: processed.Processed) -> None:
    runs = fixture_data.runs.assign(
        integrity_note=["sealed", "ALTERED: samples.csv changed", "sealed", "sealed"],
        always_empty=pd.NA,
    )
    data = dataclasses.replace(fixture_data, runs=runs)
    table = provenance.runs_table(data)
    assert "Integrity note" in table.columns
    assert "ALTERED: samples.csv changed" in set(table["Integrity note"])
    assert "Always empty" not in table.columns  # nothing to show
    assert list(table.columns)[-1] == "Use"
    assert "ALTERED: samples.csv changed" in _writeup(data)
