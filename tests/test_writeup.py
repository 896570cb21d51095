"""The per-question writeups (kvqueue.report.questions, question_sections, writeup) and the
report's structure (kvqueue.report.sections) rendered as HTML.

Budgets (issue 18), on synthetic data: the part of a writeup outside ``<details>`` stays
within 8,000 characters for one host x four interpreters plus 2,000 per further host,
and the whole writeup within 60,000 for four hosts -- for an A/B comparison (synthetic
runs of the full protocol, tests/synthetic.py ``write_hosts``), a release history and a
policy study (synthetic processed tables of the real shape). The committed data's
writeups are checked too (slow: it builds the processed tables).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic import PYTHONS, THIRD_PAIR, write_fixture, write_hosts, write_run

from kvqueue import formatting, schema
from kvqueue.ab import ab_tables, count_tables
from kvqueue.history import history_diffs
from kvqueue.params import report_params
from kvqueue.processed import store
from kvqueue.report import (
    figures,
    frames,
    html,
    processed_build,
    provenance,
    question_sections,
    questions,
    sections,
    writeup,
)
from kvqueue.sources import cache_paths

FAST = report_params.ReportSettings(resamples=2000)
REPO = Path(__file__).resolve().parent.parent
PAIR = ("vllm==0.32.0", "vllm==0.31.0")
FIGURE_FILES = {name: Path(f"/r/figures/{name}.png") for name in figures.FIGURES}
#: Size budgets (characters): the visible part for one host (4 interpreters), what each
#: further host may add, and the whole writeup for 4 hosts (issue 18).
VISIBLE_BUDGET, VISIBLE_PER_HOST, WHOLE_BUDGET_4_HOSTS = 8_000, 2_000, 60_000

#: ``<details>`` blocks of a writeup (as written by ``writeup.section_markdown``).
_DETAILS = re.compile(r"<details>.*?</details>", re.S)


def _visible(markdown: str) -> str:
    """The writeup without its ``<details>`` blocks: what a reader sees unfolded."""
    return _DETAILS.sub("", markdown)


def _hosts(q: questions.Question) -> int:
    """Hosts whose runs answer the question (the writeup's size budget grows with them)."""
    if q.kind == questions.AB:
        return int(q.data.headline_runs()["host"].nunique())
    table = q.data.history if q.kind == questions.HISTORY else q.data.policy
    return int(table.loc[table["headline"].astype(bool), "host"].nunique())


def _question(data: store.Processed, kind: str, pair: tuple[str, str] | None = None):
    found = [q for q in questions.find(data) if q.kind == kind and (pair is None or q.pair == pair)]
    assert len(found) == 1, [q.slug for q in questions.find(data)]
    return found[0]


def _writeup(data: store.Processed, pair: tuple[str, str] = PAIR, **kw: object) -> str:
    return writeup.question_writeup(_question(data, questions.AB, pair), **kw)  # type: ignore[arg-type]


def _check_budget(md: str, hosts: int) -> tuple[int, int]:
    visible = _visible(md)
    budget_visible = VISIBLE_BUDGET + VISIBLE_PER_HOST * max(0, hosts - 1)
    budget_whole = WHOLE_BUDGET_4_HOSTS
    assert len(visible) <= budget_visible, (len(visible), budget_visible)
    assert len(md) <= budget_whole, len(md)
    assert md.count("<details>") == md.count("</details>")
    return len(visible), len(md)


@pytest.fixture(scope="module")
def one_host(tmp_path_factory: pytest.TempPathFactory) -> store.Processed:
    """One host x four interpreters, two comparisons: the shape of the committed data."""
    root = tmp_path_factory.mktemp("one-host")
    write_hosts(root / "raw", hosts=1)
    return processed_build.build(
        root / "raw", root / "processed", report_params.ReportSettings(resamples=500)
    )


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory: pytest.TempPathFactory) -> store.Processed:
    root = tmp_path_factory.mktemp("fixture")
    write_fixture(root / "raw", tiny=True)
    return processed_build.build(root / "raw", root / "processed", FAST)


#: The default pairs of the queue subject: the fixtures hold queue runs only (the pool
#: subject's default pairs, labelled pool:..., have their own tests).
QUEUE_PAIRS = tuple(p for p in report_params.DEFAULT_PAIRS if not p[0].startswith("pool:"))


# ---------------------------------------------------------------------------------------
# questions


def test_each_comparison_is_a_question_newest_first(one_host: store.Processed) -> None:
    found = questions.find(one_host)
    assert [q.kind for q in found] == [questions.AB, questions.AB]
    assert {q.pair for q in found} == set(QUEUE_PAIRS)
    assert [q.newest for q in found] == sorted((q.newest for q in found), reverse=True)
    for q in found:
        # Scoped: only its own comparison (and A/A copies of its variants) remain.
        pairs = q.data.summary.loc[q.data.summary["kind"] == "pair", ["candidate", "baseline"]]
        assert set(map(tuple, pairs.to_numpy())) == {q.pair}
        assert q.data.history.empty and q.data.policy.empty
        assert _hosts(q) == 1


def test_writeup_names_only_its_comparison(one_host: store.Processed) -> None:
    md = _writeup(one_host, ("kvqueue", "vllm==0.32.0"))
    first_screen = md[:1500]
    assert first_screen.startswith("## `kvqueue` vs `vllm==0.32.0`")
    assert "0.31.0" not in _visible(md).split("### Reproduce")[0].split("### Validation")[0]
    # No project-wide section: no policy, history, provenance of every run.
    for absent in ("Allocation policies", "Release history", "Provenance", "Only in"):
        assert absent not in md


def test_write_writeups_writes_one_file_per_question(
    one_host: store.Processed, tmp_path: Path
) -> None:
    stale = tmp_path / writeup.WRITEUPS / "gone-vs-away.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    paths = writeup.write_writeups(one_host, tmp_path, draw=False)
    assert [p.name for p in paths] == [f"{q.slug}.md" for q in questions.find(one_host)]
    assert not stale.exists()  # a question no longer in the data leaves no writeup
    for p in paths:
        assert p.read_text(encoding="utf-8").startswith("## `")


def test_figure_folders_go_with_their_writeups(one_host: store.Processed, tmp_path: Path) -> None:
    """After a re-render from another RAW_DIR, a writeup no longer in the data takes its
    figure folder with it (issue 36.6); a kept question's folder and a file not ours stay."""
    folder = tmp_path / writeup.WRITEUPS
    kept = questions.find(one_host)[0].slug
    for slug in ("gone-vs-away", "other-vs-away", kept):
        (folder / slug).mkdir(parents=True)
        (folder / slug / "forest.png").write_bytes(b"png")
        (folder / f"{slug}.md").write_text("old")
    (folder / "other-vs-away" / "notes.txt").write_text("mine")
    writeup.write_writeups(one_host, tmp_path, draw=False)
    assert not (folder / "gone-vs-away").exists()
    assert sorted(p.name for p in (folder / "other-vs-away").iterdir()) == ["notes.txt"]
    assert (folder / kept / "forest.png").exists()  # not drawn (draw=False), not stale


# ---------------------------------------------------------------------------------------
# budgets


@pytest.mark.parametrize("pair", QUEUE_PAIRS)
def test_ab_writeup_within_budget_one_host(
    one_host: store.Processed, pair: tuple[str, str]
) -> None:
    md = _writeup(one_host, pair, files=FIGURE_FILES)
    _check_budget(md, hosts=1)
    visible = _visible(md)
    for heading in ("### Answer", "### Validation", "### Environment", "### Reproduce"):
        assert heading in visible
    assert "**Gate.**" in visible and "**Noise floor.**" in visible
    assert visible.count("- **synth-host-1**:") == 1
    assert "make bench HOST=synth-host-1" in visible


@pytest.mark.slow
def test_ab_writeup_within_budget_four_hosts(tmp_path: Path) -> None:
    write_hosts(tmp_path / "raw", hosts=4)
    settings = report_params.ReportSettings(
        pairs=(*report_params.DEFAULT_PAIRS, THIRD_PAIR), resamples=200
    )
    data = processed_build.build(tmp_path / "raw", tmp_path / "processed", settings)
    for q in questions.find(data):
        assert _hosts(q) == 4
        md = writeup.question_writeup(q, files=FIGURE_FILES)
        _check_budget(md, hosts=4)
        # Every table the writeup carries is there whole (nothing cut to fit).
        for s in question_sections.build(q):
            if s.table is not None:
                assert frames.to_markdown(s.table) in md, s.key
        grid = next(s for s in question_sections.build(q) if s.key == "results")
        assert grid.rows == 4 * len(PYTHONS)


def _history_tables(hosts: int, pythons: int = 4, versions: int = 17):
    """Processed history tables of the real shape: every version x case, one step per
    consecutive pair, every third step significant."""
    rng = np.random.default_rng(1)
    cases = ("alloc1", "alloc8", "mix", "remove")
    rels = [f"0.{k + 6}.0" for k in range(versions)]
    vrows, srows = [], []
    for h in range(hosts):
        for p in range(pythons):
            run = f"20261201T1{h}{p}000Z-cp31{p}-h{h}"
            for case in cases:
                for k, rel in enumerate(rels):
                    ns = 500 * (1 + rng.random())
                    vrows.append(
                        dict(
                            host=f"synth-host-{h + 1}",
                            interpreter=f"CPython 3.1{p}.0",
                            run_id=run,
                            headline=True,
                            reduced="",
                            case=case,
                            pool=100_000,
                            version=f"vllm=={rel}",
                            order=k,
                            releases=rel,
                            first_release=rel,
                            last_release=rel,
                            adapter="",
                            n_processes=11,
                            ns=ns,
                            ns_low=ns * 0.98,
                            ns_high=ns * 1.02,
                            ratio_to_newest=1.0,
                            ratio_low=0.99,
                            ratio_high=1.01,
                        )
                    )
                    if k:
                        change = (-0.3 if k % 3 == 0 else 0.001) * rng.random()
                        srows.append(
                            dict(
                                host=f"synth-host-{h + 1}",
                                interpreter=f"CPython 3.1{p}.0",
                                run_id=run,
                                headline=True,
                                case=case,
                                pool=100_000,
                                from_version=f"vllm=={rels[k - 1]}",
                                to_version=f"vllm=={rel}",
                                release_range=f"{rels[k - 1]} → {rel}",
                                n_processes=11,
                                change=change,
                                ci_low=change - 0.01,
                                ci_high=change + 0.01 if k % 3 == 0 else change + 0.02,
                                significant=k % 3 == 0,
                            )
                        )
    return pd.DataFrame(vrows), pd.DataFrame(srows), rels


def _fake_cache(folder: Path, rels: list[str]) -> None:
    """A cache with a small queue and block class per release (written here, not vLLM's)."""
    for k, rel in enumerate(rels):
        path = folder / f"vllm-{rel}" / cache_paths.MODULE_NAME
        path.parent.mkdir(parents=True)
        slots = "slots=True" if k >= 9 else ""
        path.write_text(
            f"from dataclasses import dataclass\n\n\n@dataclass({slots})\n"
            f"class KVCacheBlock:\n    block_id: int\n    ref_cnt: int = {k}\n\n\n"
            "class FreeKVCacheBlockQueue:\n"
            + "".join(f"    def m{j}(self):\n        return {j + k}\n" for j in range(30))
        )


@pytest.mark.parametrize("hosts", [1, 4])
def test_history_writeup_within_budget(
    fixture_data: store.Processed, hosts: int, tmp_path: Path, monkeypatch
) -> None:
    versions, steps, rels = _history_tables(hosts)
    _fake_cache(tmp_path / "kvqueue", rels)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = dataclasses.replace(fixture_data, history=versions, history_steps=steps)
    q = _question(data, questions.HISTORY)
    assert _hosts(q) == hosts
    md = writeup.question_writeup(q, files=FIGURE_FILES)
    _check_budget(md, hosts=hosts)
    # Each significant step has its diff, folded; the 0.14 -> 0.15 step shows slots=True.
    assert md.count("```diff") == len(steps.loc[steps["significant"], "release_range"].unique())
    step = md[md.index(" 0.14.0 → 0.15.0</summary>") :]
    step = step[: step.index("</details>")]
    assert "-@dataclass()" in step and "+@dataclass(slots=True)" in step
    assert "```diff" not in _visible(md)
    # Nothing of the A/B side.
    assert "make bench" not in md and "Validation" not in md


def test_history_diff_says_when_a_release_is_not_cached(tmp_path: Path) -> None:
    _fake_cache(tmp_path, ["0.1.0"])
    text = history_diffs.step_diff(["0.1.0"], ["0.2.0"], cache=tmp_path)
    assert text == f"`0.2.0`: {history_diffs.NOT_CACHED}."
    assert "`make diffs` fetches it in seconds" in text  # not a 17-minute timing job
    # Any release of a version will do: the second one is cached.
    _fake_cache(tmp_path / "b", ["0.1.0", "0.3.0"])
    assert "```diff" in history_diffs.step_diff(["0.1.0"], ["0.2.0", "0.3.0"], cache=tmp_path / "b")
    assert history_diffs.step_diff([], ["0.1.0"], cache=tmp_path).startswith("One side is not")


def test_cache_path_rule_is_defined_once() -> None:
    from kvqueue.sources import release_cache

    assert release_cache.cached_path is cache_paths.cached_path
    assert "def cached_path" not in (REPO / "kvqueue/sources/release_cache.py").read_text()


def _policy_table(hosts: int) -> pd.DataFrame:
    """A processed ``policy`` table of the steady-state protocol (both regimes, the age
    curve and the steady state) plus one run of the older protocol, per host."""
    from kvqueue import schema
    from kvqueue.policy import policy_analysis

    rows = []
    steady_metrics = (
        "desc_reduction",
        "desc_per_read",
        "desc_p50",
        "desc_p90",
        "runs_reduction",
        "ns_added",
        "ns_saved",
        "net_ns",
        "hit_share",
        "settled",
    )
    ages = [("steady", 200.0, 400.0)] + [(f"{a}–{a + 50}", a, a + 50) for a in range(0, 400, 50)]
    policies = (
        ("lru", ""),
        ("contig-w1", "1"),
        ("contig-w2", "2"),
        ("contig-w4", "4"),
        ("contig-w8", "8"),
    )
    for h in range(hosts):
        for p in range(4):
            base = dict(
                host=f"synth-host-{h + 1}",
                interpreter=f"CPython 3.1{p}.0",
                variant="kvqueue",
                headline=True,
                threshold=16,
                n_processes=11,
                estimate=1.5,
                ci_low=1.4,
                ci_high=1.6,
                ci_method="t",
            )
            for regime in ("chat", "agentic"):
                for age, lo, hi in ages:
                    for policy, window in policies:
                        for m in steady_metrics:
                            rows.append(
                                dict(
                                    base,
                                    run_id=f"20261201T1{h}{p}000Z-policy-cp31{p}-{regime}",
                                    protocol=schema.POLICY_PROTOCOL,
                                    regime=regime,
                                    age=age,
                                    age_from=lo,
                                    age_to=hi,
                                    policy=policy,
                                    window=window,
                                    metric=m,
                                )
                            )
            for policy, window in policies:
                rows.append(
                    dict(
                        base,
                        run_id=f"20261130T1{h}{p}000Z-cp31{p}-old",
                        protocol=policy_analysis.OLDER_PROTOCOL,
                        regime="",
                        age="",
                        age_from=float("nan"),
                        age_to=float("nan"),
                        policy=policy,
                        window=window,
                        metric="runs_reduction",
                    )
                )
    return pd.DataFrame(rows, columns=list(schema.PROCESSED_TABLES["policy"]))


@pytest.mark.parametrize("hosts", [1, 4])
def test_policy_writeup_within_budget(fixture_data: store.Processed, hosts: int) -> None:
    data = dataclasses.replace(fixture_data, policy=_policy_table(hosts))
    q = _question(data, questions.POLICY)
    md = writeup.question_writeup(q, files=FIGURE_FILES)
    _check_budget(md, hosts=hosts)
    assert "make policy HOST=synth-host-1" in md and "make bench" not in md


@pytest.mark.slow
def test_committed_data_writeups_within_budget(tmp_path: Path) -> None:
    data = processed_build.build(REPO / "data" / "raw", tmp_path / "processed", FAST)
    found = questions.find(data)
    assert {q.kind for q in found} >= {questions.AB}
    for q in found:
        _check_budget(writeup.question_writeup(q, files=FIGURE_FILES), _hosts(q))


# ---------------------------------------------------------------------------------------
# a contributor's comparison: names, pinned commits, cases, intervals


def _renamed(data: store.Processed) -> store.Processed:
    """The fixture with vllm==0.31.0 -> base, vllm==0.32.0 -> mine, both git sources."""
    names = {"vllm==0.31.0": "base", "vllm==0.32.0": "mine", "vllm==0.31.0#2": "base#2"}
    sources = {"vllm==0.31.0": "git:/src/vllm@main", "vllm==0.32.0": "git:/src/vllm@mine"}
    commits = {"vllm==0.31.0": "a" * 40, "vllm==0.32.0": "b" * 40}

    def ren(df: pd.DataFrame) -> pd.DataFrame:
        out = df.copy()
        for col in ("label", "candidate", "baseline", "variant", "baseline"):
            if col in out.columns:
                out[col] = out[col].replace(names)
        return out

    variants = ren(data.variants)
    variants["commit"] = data.variants["source"].map(commits).fillna("")
    variants["source"] = data.variants["source"].replace(sources)
    runs = data.runs.copy()
    runs["baseline"] = runs["baseline"].replace(names)
    return dataclasses.replace(
        data,
        settings=dataclasses.replace(data.settings, pairs=()),
        runs=runs,
        variants=variants,
        summary=ren(data.summary),
        ratios=ren(data.ratios),
        process_medians=ren(data.process_medians),
    )


def test_reproduce_keeps_names_and_pins_commits(fixture_data: store.Processed) -> None:
    data = _renamed(fixture_data)
    md = _writeup(data, ("mine", "base"))
    reproduce = md[md.index("### Reproduce") :]
    assert f"base=git:/src/vllm@{'a' * 40}" in reproduce
    assert f"mine=git:/src/vllm@{'b' * 40}" in reproduce
    assert "@main" not in reproduce and "@mine " not in reproduce


def test_the_overview_names_the_pairs_its_runs_compare(fixture_data: store.Processed) -> None:
    """report.html's first line names a contributor's pair, not the default pairs."""
    data = dataclasses.replace(
        _renamed(fixture_data),
        settings=fixture_data.settings,  # the default pairs
    )
    intro = sections.intro_note(data)
    assert "`mine` vs `base`" in intro
    assert "vllm==0.32.0" not in intro and "vllm==0.31.0" not in intro
    assert "`vllm==0.32.0` vs `vllm==0.31.0`" in sections.intro_note(fixture_data)


def test_cases_are_selectable(fixture_data: store.Processed) -> None:
    # Selected cases come first; every other measured case is folded, never dropped.
    default = _writeup(fixture_data)
    assert "remove ·" not in _visible(default) and "remove ·" in default
    chosen = _writeup(fixture_data, cases=("remove",))
    assert "remove · " in _visible(chosen) and "alloc1 · " not in _visible(chosen)
    assert "The other measured cases (alloc1, alloc2, mix)" in chosen
    # A case the runs did not measure is named, never shown empty.
    missing = _writeup(fixture_data, cases=("alloc1", "alloc32"))
    assert "Not measured in these runs: `alloc32`" in missing


def test_too_few_processes_reads_na(fixture_data: store.Processed) -> None:
    summary = fixture_data.summary.assign(
        ci_low=np.nan, ci_high=np.nan, aa_half_width=np.nan, n_processes=2
    )
    runs = fixture_data.runs.assign(processes=2)
    data = dataclasses.replace(fixture_data, summary=summary, runs=runs)
    md = _writeup(data)
    assert not re.search(r"\bnan\b", md, re.I), re.findall(r".{40}\bnan\b.{20}", md, re.I)
    assert f"[{formatting.TOO_FEW}]" in md
    assert "(CI n/a)" not in md


def test_times_behind_the_results_say_what_they_are(fixture_data: store.Processed) -> None:
    md = _writeup(fixture_data)
    block = md[md.index("Times behind the results") :]
    block = block[: block.index("</details>")]
    assert "median over processes of the per-process median time" in block
    assert "*paired* per-process ratio" in block


# ---------------------------------------------------------------------------------------
# the HTML report's structure


def test_sections_open_with_the_answer(fixture_data: store.Processed) -> None:
    secs = sections.build(fixture_data)
    keys = [s.key for s in secs]
    assert keys[:4] == ["title", "summary", "forest", "results"]
    assert all(s.summary for s in secs[:3]) and not any(s.summary for s in secs[3:])
    assert secs[2].figure == "forest"
    assert keys[-1] == "runs"
    for s in secs:
        if s.table is not None and s.key not in ("summary", "results"):
            assert s.fold, s.key
    assert all(s.figure is None or s.figure in figures.FIGURES for s in secs)


def test_html_renders_every_section(fixture_data: store.Processed) -> None:
    secs = sections.build(fixture_data)
    page = "\n".join(html.section_html(s) for s in secs)
    positions_html = [page.index(f'id="{s.key}"') for s in secs]
    assert positions_html == sorted(positions_html)
    for s in secs:
        if s.table is not None and not s.table.empty:
            assert frames.to_html(s.table) in page, s.key


def test_figures_are_files_with_alt_text(fixture_data: store.Processed) -> None:
    md = _writeup(fixture_data, files=FIGURE_FILES)
    for name in ("forest", "process_ratios"):
        assert f"![{figures.FIGURES[name].alt}](figures/{name}.png)" in md
    assert "forest.png" in _visible(md)
    # Without figure files there is no dangling link and no empty heading.
    bare = _writeup(fixture_data)
    assert "](figures/" not in bare and "Forest plot" not in bare


def test_writeup_content(fixture_data: store.Processed) -> None:
    md = _writeup(fixture_data)
    assert md.startswith("## `vllm==0.32.0` vs `vllm==0.31.0`")
    assert re.search(
        r"\| synth-a \| CPython 3\.12\.1 \| \d+\.\d% \[\d+\.\d, \d+\.\d\] faster \|", md
    )
    assert "make bench HOST=synth-a" in md and "AA=1" in md
    assert "2,000 resamples" in md


# ---------------------------------------------------------------------------------------
# intervals: one formatter


def test_interval_formatting_is_one_helper() -> None:
    assert formatting.fmt_ci(0.189, 0.21) == "[18.9, 21.0]"
    assert formatting.fmt_ci(np.nan, np.nan) == "n/a"
    assert formatting.fmt_ci(0.1, np.nan) == "n/a"
    assert formatting.fmt_ci(None, pd.NA) == "n/a"  # type: ignore[arg-type]
    assert formatting.fmt_estimate(0.203, 0.195, 0.213) == "20.3% [19.5, 21.3]"
    assert formatting.fmt_estimate(0.203, np.nan, np.nan) == "20.3% (CI n/a)"
    assert (
        formatting.fmt_estimate(0.203, np.nan, np.nan, too_few=True)
        == "20.3% [n/a (too few processes)]"
    )
    assert formatting.fmt_estimate(np.nan, np.nan, np.nan) == "n/a"
    assert formatting.fmt_pct(-0.0004) == "0.0%"
    # No bound outside the metric's range: clipped where the caller gives it.
    assert formatting.fmt_number_estimate(9.31, -7.18, 25.81, 2) == "9.31 [-7.18, 25.81]"
    assert (
        formatting.fmt_number_estimate(9.31, -7.18, 25.81, 2, bounds=(0.0, 100.0))
        == "9.31 [0.00, 25.81]"
    )
    assert (
        formatting.fmt_number_estimate(1.53, np.nan, np.nan, 2, too_few=True)
        == "1.53 [n/a (too few processes)]"
    )
    # Unbounded above (a break-even whose saving's interval reaches 0) is a result: it
    # printed as a bare "470.2", as if exact.
    assert formatting.fmt_number_estimate(470.24, 42.51, np.inf, 1) == "470.2 [42.5, ∞]"


def test_missing_interval_reads_na_in_the_html(fixture_data: store.Processed) -> None:
    summary = fixture_data.summary.assign(ci_low=np.nan, ci_high=np.nan, aa_half_width=np.nan)
    data = dataclasses.replace(fixture_data, summary=summary)
    page = "\n".join(html.section_html(s) for s in sections.build(data))
    assert not re.search(r"\bnan\b", page, re.I), re.findall(r".{40}\bnan\b.{20}", page, re.I)
    assert "(CI n/a)" in page and ">n/a<" in page


# ---------------------------------------------------------------------------------------
# the runs table is generic


def test_runs_table_shows_columns_added_later(fixture_data: store.Processed) -> None:
    runs = fixture_data.runs.assign(
        integrity_note=["sealed", "ALTERED: samples.csv changed", "sealed", "sealed"],
        always_empty=pd.NA,
    )
    data = dataclasses.replace(fixture_data, runs=runs)
    table = provenance.runs_table(data)
    assert "Integrity note" in table.columns
    assert "ALTERED: samples.csv changed" in set(table["Integrity note"])
    assert "Always empty" not in table.columns
    assert list(table.columns)[-1] == "Use"


def test_history_ending_at_your_source_is_its_own_question(
    fixture_data: store.Processed,
) -> None:
    versions, steps, rels = _history_tables(1, pythons=1)
    run = versions["run_id"].iloc[0]
    mine = versions[versions["order"] == versions["order"].max()].assign(
        version="mine", order=len(rels), releases="mine", first_release="mine"
    )
    own = pd.concat([versions, mine]).assign(run_id=run + "-own", headline=False)
    data = dataclasses.replace(
        fixture_data,
        history=pd.concat([versions, own], ignore_index=True),
        history_steps=steps,
    )
    found = {q.slug: q for q in questions.find(data) if q.kind == questions.HISTORY}
    assert set(found) == {"history", "history-mine"}
    assert found["history-mine"].title == "Release history up to `mine`"
    assert set(found["history-mine"].data.history["run_id"]) == {run + "-own"}
    assert set(found["history"].data.history["run_id"]) == {run}


def test_report_refuses_an_unknown_case_before_writing(tmp_path: Path, capsys) -> None:
    from kvqueue import __main__ as cli

    code = cli.main(
        ["report", "--raw-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--cases", "nope"]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown case 'nope'" in err[0]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------
# a writeup that reads right either way (issue 36)


@pytest.fixture(scope="module")
def slower(tmp_path_factory: pytest.TempPathFactory) -> store.Processed:
    """One run where the candidate takes 17 % more time in every case (seven cases)."""
    root = tmp_path_factory.mktemp("slower")
    write_run(
        root / "raw",
        host="synth",
        sources=("vllm==0.31.0", "vllm==0.32.0"),
        factors={"vllm==0.31.0": 1.0, "vllm==0.32.0": 1.17},
        processes=7,
        confirm_processes=0,
        samples=3,
        pools=(2048,),
        python_version="3.11.7",
    )
    return processed_build.build(root / "raw", root / "processed", FAST)


_VERDICT = re.compile(
    r"\*\*`vllm==0\.32\.0` makes alloc1, alloc2, alloc8, alloc32, mix, popappend and remove "
    r"(1\d\.\d)–(1\d\.\d) % slower than `vllm==0\.31\.0` on CPython 3\.11\.7, one host "
    r"\(synth\)\.\*\*"
)


def test_a_slower_change_opens_with_its_verdict_and_shows_every_case(
    slower: store.Processed,
) -> None:
    md = _writeup(slower)
    title, first = md.split("\n\n")[:2]
    assert title == "## `vllm==0.32.0` vs `vllm==0.31.0`"
    found = _VERDICT.fullmatch(first)
    assert found, first
    assert 13 <= float(found[1]) <= float(found[2]) <= 19  # 1 − 1.17 = −17 %, noisy
    # The headline cases visible, every other measured case folded, none dropped.
    visible = _visible(md)
    for case in ("alloc1", "alloc2", "mix"):
        assert f"{case} · 2,048" in visible
    for case in ("alloc8", "alloc32", "popappend", "remove"):
        assert f"{case} · 2,048" not in visible and f"{case} · 2,048" in md
    assert "The other measured cases (alloc8, alloc32, popappend, remove)" in md


def test_the_verdict_names_each_kind_of_cell_with_its_share(slower: store.Processed) -> None:
    summary = slower.summary.copy()
    unchanged = summary["case"] == "remove"
    summary.loc[unchanged, "verdict"] = "no change within ±1%"
    summary.loc[summary["case"] == "mix", "verdict"] = "inconclusive"
    data = dataclasses.replace(slower, summary=summary)
    sentence = ab_tables.verdict_sentence(data, schema.CASES)
    assert sentence.startswith(
        "`vllm==0.32.0` makes alloc1, alloc2, alloc8, alloc32 and popappend "
    )
    assert " % slower (5 of 7 cells) than `vllm==0.31.0` on CPython 3.11.7, one host" in sentence
    assert sentence.endswith(
        "; remove no change within ±1% (1 of 7 cells); mix inconclusive (1 of 7 cells)."
    )


def _agreement_cells(time: float, instr: float, n: int = 4) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host": ["h"] * n,
            "interpreter": ["CPython 3.11.7"] * n,
            "case": ["alloc2", "alloc8", "alloc32", "mix"][:n],
            "pool": [2048] * n,
            "candidate": ["mine"] * n,
            "baseline": ["main"] * n,
            "time": [time] * n,
            "ci_low": [time - 0.01] * n,
            "ci_high": [time + 0.01] * n,
            "instr": [instr] * n,
            "cycles": [np.nan] * n,
            "gap_pp": [100 * (time - instr)] * n,
        }
    )


def test_instructions_beside_time_read_right_for_a_slowdown() -> None:
    # 17 % slower for 10.5 % more instructions: the instructions added were costly ones.
    slow = count_tables.agreement_sentence(_agreement_cells(-0.17, -0.105))
    assert "Where both rose (4 cells: the candidate is slower" in slow
    assert "time rose further than instructions in 4: the instructions added were costly" in slow
    assert "saved" not in slow and "fell" not in slow
    # 5 % slower for 10 % more instructions: the instructions added were cheap ones.
    cheap = count_tables.agreement_sentence(_agreement_cells(-0.05, -0.10))
    assert "time rose less than instructions in 4: the instructions added were cheap" in cheap
    # A speed-up reads as before.
    fast = count_tables.agreement_sentence(_agreement_cells(0.05, 0.10))
    assert "Where both fell (4 cells" in fast and "instructions saved were cheap" in fast
    assert "rose" not in fast
