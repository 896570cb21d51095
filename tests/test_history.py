"""The release history's plan (kvqueue.history.history_collect): which releases, which distinct
versions,
what is skipped and why, and the bench parameters of a history run.

The releases are stand-ins: ``history._probe`` is replaced by a function that loads
hand-written classes (``tests/queues``) for made-up release numbers, so nothing here
needs the network or contains vLLM text.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest

from kvqueue.errors import BenchInputError
from kvqueue.history import history_collect
from kvqueue.measure import interpreter_checks
from kvqueue.params import bench_params, history_params
from kvqueue.sources import loader, versions
from kvqueue.sources.fetch_errors import ModuleMissing, ReleaseNotFound
from kvqueue.sources.release_cache import MEMBER

QUEUES = Path(__file__).resolve().parent / "queues"
GOOD = QUEUES / "good.py"
HEADTAIL = QUEUES / "headtail.py"

# Made-up releases: two with good.py, one with a different block class (a copy of
# good.py with a comment inside its KVCacheBlock), two head-tail, two that predate it.
_SOURCE = {
    "3.2.0": "good",
    "3.1.0": "good",
    "3.0.0": "good-other-block",
    "2.1.0": "headtail",
    "2.0.0": "headtail",
}
_OLD = ["1.9.0", "1.8.0"]


@pytest.fixture
def releases(monkeypatch, tmp_path):
    other = tmp_path / "other_block.py"
    other.write_text(
        GOOD.read_text().replace(
            "class KVCacheBlock:\n", "class KVCacheBlock:\n    # another block class text\n", 1
        )
    )
    paths = {"good": GOOD, "good-other-block": other, "headtail": HEADTAIL}
    probed: list[str] = []

    def probe(release: str, files: object) -> loader.Variant:
        probed.append(release)
        if release in _OLD:
            raise ModuleMissing(f"vLLM release {release} has no {MEMBER}")
        if release not in _SOURCE:
            raise ReleaseNotFound(f"vLLM release {release} does not exist")
        (variant,) = loader.load_variants([str(paths[_SOURCE[release]])], block_mode="own")
        return variant

    monkeypatch.setattr(history_collect, "_probe", probe)
    listing = {v: [] for v in [*_SOURCE, *_OLD, "1.0.0", "3.3.0rc1"]}
    return listing, probed


def test_plan_groups_releases_into_distinct_versions(releases):
    listing, probed = releases
    out = io.StringIO()
    found = history_collect.plan(None, listing=listing, progress=out)
    assert [v.source for v in found.versions] == ["vllm==3.2.0", "vllm==3.0.0", "vllm==2.1.0"]
    assert [v.releases for v in found.versions] == [
        ["3.2.0", "3.1.0"],
        ["3.0.0"],
        ["2.1.0", "2.0.0"],
    ]
    # 3.0.0 differs from 3.1.0 by its block class text only: a version of its own.
    assert found.versions[0].queue_sha256 == found.versions[1].queue_sha256
    assert found.versions[0].block_sha256 != found.versions[1].block_sha256
    old = found.versions[2]
    assert old.adapter == "popleft-loop" and old.structure == "head-tail"
    assert old.missing == ("prepend_n", "iter_blocks_after")
    # The pre-release is never probed; probing stops at the first release without the
    # module, and the older ones are named as not probed.
    assert probed == ["3.2.0", "3.1.0", "3.0.0", "2.1.0", "2.0.0", "1.9.0"]
    assert found.skipped[0]["release"] == "1.9.0"
    assert found.skipped[1] == {
        "release": "1.0.0 .. 1.8.0",
        "reason": f"not probed: older than 1.9.0, which predates {MEMBER}",
    }
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("history: version ") for line in lines) == 3
    assert "version 3/3: vllm==2.1.0 (releases 2.0.0, 2.1.0;" in out.getvalue()


def test_plan_record_is_json_ready(releases):
    import json

    listing, _ = releases
    record = history_collect.plan(None, listing=listing, progress=io.StringIO()).record()
    assert json.loads(json.dumps(record)) == record
    assert record["versions"][2]["releases"] == ["2.0.0", "2.1.0"]
    assert record["versions"][2]["first_release"] == "2.0.0"
    assert record["releases_listed"][0] == "1.0.0"
    assert record["pairing"] == history_collect.PAIRING


def test_given_releases_are_probed_as_given(releases):
    listing, probed = releases
    found = history_collect.plan(
        ["3.1.0", "2.0.0", "1.9.0"], listing=listing, progress=io.StringIO()
    )
    assert [v.releases for v in found.versions] == [["3.1.0"], ["2.0.0"]]
    assert found.skipped == [{"release": "1.9.0", "reason": f"vLLM release 1.9.0 has no {MEMBER}"}]
    assert probed == ["3.1.0", "2.0.0", "1.9.0"]


def test_unknown_release_is_one_line(releases):
    listing, _ = releases
    with pytest.raises(
        BenchInputError, match=r"^vllm==4\.0\.0: vLLM release 4\.0\.0 does not exist$"
    ):
        history_collect.plan(["4.0.0", "3.2.0"], listing=listing, progress=io.StringIO())


def test_one_version_is_not_a_history(releases):
    listing, _ = releases
    with pytest.raises(BenchInputError, match="at least two distinct versions"):
        history_collect.plan(["3.2.0", "3.1.0"], listing=listing, progress=io.StringIO())


def test_releases_text():
    assert history_collect.releases_from_text("") is None
    assert history_collect.releases_from_text(" 0.9.2 vllm==0.10.0 ") == ["0.9.2", "0.10.0"]
    with pytest.raises(BenchInputError, match="not a vLLM version number"):
        history_collect.releases_from_text("0.9.2 latest")


def test_history_params_take_the_history_defaults():
    texts = {f.name: None for f in bench_params.bench_fields()}
    texts["host"] = "box"
    bench = history_params.from_text(texts)
    assert bench.cases == ("alloc1", "alloc8", "mix", "remove")
    assert bench.pools == (100_000,)
    assert bench.block_mode == "own"
    assert bench.confirm_processes == 0
    texts["pools"] = "2048"
    assert history_params.from_text(texts).pools == (2048,)


@pytest.mark.parametrize("name", ["variants", "aa", "block_source"])
def test_history_params_refuse_what_the_history_chooses(name):
    texts = {f.name: None for f in bench_params.bench_fields()}
    texts.update(host="box", **{name: "1"})
    with pytest.raises(BenchInputError, match="chosen by make history"):
        history_params.from_text(texts)


def test_history_params_refuse_shared_blocks():
    """Shared blocks would time versions differing in their block class alike: A/A noise."""
    texts = {f.name: None for f in bench_params.bench_fields()}
    texts.update(host="box", block_mode="shared")
    with pytest.raises(BenchInputError, match=r"^BLOCK_MODE must be own for make history"):
        history_params.from_text(texts)
    texts["block_mode"] = "own"
    assert history_params.from_text(texts).block_mode == "own"


def _broken_at(monkeypatch, release: str) -> None:
    """Make ``release``'s class fail to load (a SourceError that is not 'not found')."""
    inner = history_collect._probe

    def probe(r: str, files: object) -> loader.Variant:
        if r == release:
            raise loader.SourceError(f"vllm=={r}: FreeKVCacheBlockQueue does not compile")
        return inner(r, files)

    monkeypatch.setattr(history_collect, "_probe", probe)


def test_default_history_skips_a_release_whose_class_fails_to_load(releases, monkeypatch):
    listing, _ = releases
    _broken_at(monkeypatch, "3.1.0")
    out = io.StringIO()
    found = history_collect.plan(None, listing=listing, progress=out)
    assert found.versions[0].releases == ["3.2.0"]
    assert found.skipped[0] == {
        "release": "3.1.0",
        "reason": "vllm==3.1.0: FreeKVCacheBlockQueue does not compile",
    }
    assert "history: 3.1.0: skipped (vllm==3.1.0: FreeKVCacheBlockQueue" in out.getvalue()


def test_given_release_whose_class_fails_to_load_stops_the_run(releases, monkeypatch):
    listing, _ = releases
    _broken_at(monkeypatch, "3.1.0")
    with pytest.raises(BenchInputError, match=r"^vllm==3\.1\.0: .*does not compile$"):
        history_collect.plan(["3.2.0", "3.1.0", "2.0.0"], listing=listing, progress=io.StringIO())


def test_non_consecutive_releases_are_recorded_and_warned(releases, monkeypatch):
    """3.2.0 and 3.0.0 share a version, 3.1.0 (another block class) came between."""
    listing, _ = releases
    inner = history_collect._probe
    swap = {"3.1.0": "3.0.0", "3.0.0": "3.2.0"}
    monkeypatch.setattr(history_collect, "_probe", lambda r, files: inner(swap.get(r, r), files))
    out = io.StringIO()
    found = history_collect.plan(None, listing=listing, progress=out)
    assert [v.releases for v in found.versions] == [
        ["3.2.0", "3.0.0"],
        ["3.1.0"],
        ["2.1.0", "2.0.0"],
    ]
    assert [v.non_consecutive for v in found.versions] == [True, False, False]
    assert [v["non_consecutive"] for v in found.record()["versions"]] == [True, False, False]
    assert "history: warning: vllm==3.2.0's releases are not consecutive" in out.getvalue()
    # The step into the version that came back names its earlier release too.
    from kvqueue.history import history_analysis

    newer, older = found.record()["versions"][:2]
    assert versions.step_range(older, newer) == "3.1.0 → 3.2.0 (also in 3.0.0)"
    assert history_analysis._span(newer) == "3.0.0, 3.2.0"
    assert versions.step_range(found.record()["versions"][2], older) == "2.1.0 → 3.1.0"


# ------------------------------------------------------------------ report side


def _meta(started: str, given: bool = False, cases=("alloc1", "alloc8", "mix", "remove")):
    return {
        "started_at": started,
        "history": {"releases_given": given},
        "parameters": {"cases": list(cases), "pools": [100_000]},
    }


def test_a_reduced_history_does_not_replace_the_full_one():
    from types import SimpleNamespace

    from kvqueue.history import history_analysis

    def run(run_id, meta):
        return SimpleNamespace(host="box", interpreter="3.11", run_id=run_id, meta=meta)

    full = run("a-full", _meta("2026-01-01"))
    given = run("b-given", _meta("2026-01-02", given=True))
    cut = run("c-cases", _meta("2026-01-03", cases=("alloc1",)))
    assert history_analysis.reduced(full.meta) == ""
    assert history_analysis.reduced(given.meta) == "releases given"
    assert history_analysis.reduced(cut.meta) == "cases alloc1"
    assert history_analysis._headline_ids([full, given, cut]) == {"a-full"}
    assert history_analysis._headline_ids([given, cut]) == {"c-cases"}  # newest reduced
    newer_full = run("d-full", _meta("2026-01-04"))
    assert history_analysis._headline_ids([full, cut, newer_full]) == {"d-full"}


def _report_frames(change: float, significant: bool):
    import pandas as pd

    cell = {"host": "box", "interpreter": "3.11", "case": "alloc1", "pool": 100_000}
    rows = [
        {
            **cell,
            "headline": True,
            "reduced": "releases given",
            "version": f"vllm=={v}",
            "order": i,
            "first_release": v,
            "releases": v,
            "adapter": "",
            "ns": ns,
            "ns_low": ns * 0.99,
            "ns_high": ns * 1.01,
        }
        for i, (v, ns) in enumerate([("0.1.0", 100.0), ("0.2.0", 100.0 * (1 + change))])
    ]
    steps = [
        {
            **cell,
            "headline": True,
            "from_version": "vllm==0.1.0",
            "to_version": "vllm==0.2.0",
            "release_range": "0.1.0 → 0.2.0",
            "change": change,
            "ci_low": change / 2,
            "ci_high": change * 2,
            "significant": significant,
        }
    ]
    from types import SimpleNamespace

    return SimpleNamespace(history=pd.DataFrame(rows), history_steps=pd.DataFrame(steps))


def test_figure_numbers_every_significant_step_with_a_key_of_release_ranges():
    """A 1 % step whose interval excludes 0 is marked too (no 5 % threshold): a number at
    a readable size in the panel, its release range in the key under the panels."""
    import matplotlib.pyplot as plt

    from kvqueue.history import history_present

    frames = _report_frames(0.01, significant=True)
    fig = history_present.figure(frames.history, frames.history_steps)
    marks = fig.axes[0].texts
    assert [t.get_text() for t in marks] == ["1"]
    assert all(t.get_fontsize() >= 8 and t.get_rotation() == 0 for t in marks)
    assert any("1: 0.1.0 → 0.2.0" in t.get_text() for t in fig.texts)
    assert min(t.get_fontsize() for t in fig.axes[0].get_xticklabels()) >= 7
    plt.close(fig)
    frames = _report_frames(0.2, significant=False)
    fig = history_present.figure(frames.history, frames.history_steps)
    assert len(fig.axes[0].texts) == 0
    plt.close(fig)


def test_figure_draws_the_paired_step_change_the_verdict_rests_on():
    """Issue 26.2: the figure shows each step's paired ratio and its interval (what the
    significance rests on), not absolute ns with unpaired intervals; a counted step's
    instruction change beside it; a step that does not hold up is hollow."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from kvqueue.history import history_present

    frames = _report_frames(-0.3, significant=True)
    counts = pd.DataFrame(
        [{"interpreter": "3.11", "case": "alloc1", "from_version": "vllm==0.1.0",
          "to_version": "vllm==0.2.0", "instr_change": -0.25}]
    )  # fmt: skip
    fig = history_present.figure(frames.history, frames.history_steps, counts)
    ax = fig.axes[0]
    (point,) = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert np.allclose(point.get_ydata(), [0.7])  # 1 + change, not ns per cycle
    (bar,) = [c for c in ax.collections if c.get_segments()]
    (segment,) = bar.get_segments()
    assert np.allclose(sorted(segment[:, 1]), [1 - 0.6, 1 - 0.15])  # 1 + [ci_low, ci_high]
    (cross,) = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert np.allclose(cross.get_ydata(), [0.75])
    assert point.get_markerfacecolor() == point.get_color()  # filled: significant
    assert ax.get_yscale() == "log" and "-50%" in [t.get_text() for t in ax.get_yticklabels()]
    plt.close(fig)
    frames = _report_frames(-0.3, significant=False)
    fig = history_present.figure(frames.history, frames.history_steps)
    (point,) = [ln for ln in fig.axes[0].lines if ln.get_marker() == "o"]
    assert point.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
    plt.close(fig)


def test_note_says_when_the_run_shown_is_reduced():
    from kvqueue.history import history_present

    text = history_present.note(_report_frames(0.01, significant=True).history)
    assert "No full history of box / 3.11 yet: the run shown is a reduced one" in text
    assert "(releases given)" in text


def test_make_history_budgets_the_whole_command(monkeypatch, tmp_path):
    """MAX_MINUTES counts from the command's start, as for make bench."""
    import os
    import time

    from kvqueue import __main__ as cli

    monkeypatch.delenv(bench_params.BUDGET_START_ENV, raising=False)
    seen = []
    monkeypatch.setattr(
        history_collect,
        "run_history",
        lambda *a, **k: seen.append(os.environ[bench_params.BUDGET_START_ENV]),
    )
    before = time.time()
    assert cli.main(["history", "--host", "box", "--raw-dir", str(tmp_path)]) == 0
    assert len(seen) == 1 and before <= float(seen[0]) <= time.time()


def test_a_history_run_names_its_kind_records_invalid_use_and_sizes_its_steps(
    releases, monkeypatch, tmp_path
):
    """The runner receives the history's kind (kvqueue.measure.runner.RunKind) and knows
    nothing else of it: gate and workers faked, the run folder says what it is."""
    import json

    from kvqueue import schema
    from kvqueue.measure import runner

    listing, _ = releases
    found = history_collect.plan(listing=listing, progress=io.StringIO())
    monkeypatch.setattr(history_collect, "plan", lambda releases=None, subject="queue": found)
    python = {"executable": "python3", "version": "3.11.7", "tag": "cpython-311"}
    monkeypatch.setattr(
        interpreter_checks, "check", lambda bench, announce="": bench_params.Checked(bench, python)
    )
    monkeypatch.setenv("KVQUEUE_LOCK_FILE", str(tmp_path / "lock"))
    monkeypatch.delenv(bench_params.BUDGET_START_ENV, raising=False)
    gate_calls = []

    def gate(p, invalid="refuse"):
        gate_calls.append(invalid)
        return [
            {
                "ok": True,
                "label": lab,
                "sha256": lab,
                "provenance": {"label": lab, "block_class_sha256": lab},
            }
            for lab in p.labels
        ]

    def process(p, phase, number, seed, expected, expected_block=None):
        rows = [
            [case, pool, lab, 0, pos, 1, 1, 100 + pos, 100.0 + pos + number % 2, 0]
            for case in p.cases
            for pool in p.pools
            for pos, lab in enumerate(p.labels)
        ]
        return {"rows": rows, "cpu": 0, "pinned": True, "note": "", "seconds": 0.1, "loops": {}}

    monkeypatch.setattr(runner, "run_gate", gate)
    monkeypatch.setattr(runner, "run_process", process)
    bench = history_params.from_text(
        {"host": "box", "processes": "3", "max_processes": "4", "max_minutes": "60"}
    )
    run_dir = history_collect.run_history(bench, None, tmp_path / "raw")
    assert gate_calls == ["record"]
    assert run_dir.name.split("-")[1:3] == ["history", "cp311"]
    record = json.loads((run_dir / schema.RUN_JSON).read_text(encoding="utf-8"))
    keys = list(record)
    assert keys[keys.index("process_info") + 1 : keys.index("process_info") + 3] == [
        "kind",
        "history",
    ]
    assert record["run_id"] == run_dir.name and record["status"] == "complete"
    labels = [v["label"] for v in record["history"]["versions"]]
    steps = {f"{new} vs {old}" for new, old in itertools.pairwise(labels)}
    sized = {key.split(" ", 1)[1] for key in record["sizing"]["required"]}
    assert sized == steps and record["sizing"]["cases"] == list(bench.cases)


@pytest.mark.parametrize("newest", ["bogus", "git:/nonexistent/vllm@main"])
def test_a_newest_source_that_cannot_be_read_is_one_line_before_any_release_is_listed(
    newest: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_plan(releases: object = None) -> None:
        raise AssertionError("the releases were listed before NEWEST was read")

    monkeypatch.setattr(history_collect, "plan", no_plan)
    bench = bench_params.make_params(host="h")
    with pytest.raises(BenchInputError, match=r"^NEWEST: "):
        history_collect.run_history(bench, None, tmp_path / "raw", newest=newest)
    assert not (tmp_path / "raw").exists()


def test_newest_is_one_source_of_your_own():
    assert history_params.newest_from_text("") is None
    assert history_params.newest_from_text(" mine=git:~/v@mine ") == "mine=git:~/v@mine"
    with pytest.raises(BenchInputError, match="NEWEST is a source of your own"):
        history_params.newest_from_text("vllm==0.32.0")
    with pytest.raises(BenchInputError, match="NEWEST takes one source"):
        history_params.newest_from_text("a.py b.py")


def test_own_source_is_the_newest_point_of_the_history(good_path):
    """NEWEST's record entry has no releases; the analysis labels its step from the last
    release to its label, and its span is its label."""
    from kvqueue.history import history_analysis
    from kvqueue.sources import loader

    (variant,) = loader.load_variants([f"mine={good_path}"], block_mode="own")
    own = history_collect.own_version_record(variant)
    assert own["label"] == "mine" and own["releases"] == []
    older = {"label": "vllm==0.33.0", "releases": ["0.32.0", "0.33.0"]}
    assert versions.step_range(older, own) == "0.33.0 → mine"
    assert history_analysis._span(own) == "mine"
