"""The manager subject in the report: its comparisons, writeups and history are its own.

A manager comparison's writeup opens with a verdict, gives the saving per request and per
block, the share of a whole release's saving a ``+queue=`` swap explains
(``count_figures.swap_shares``), and what a CPU-only measurement cannot show beside vLLM
PR #21005's claim (instructions unless a timed run measured the cell). The overview keeps
the three subjects apart; a manager history is ``history-manager``. Built from small
processed frames with known numbers: no valgrind, no measurement.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from kvqueue import schema
from kvqueue.ab import ab_analysis, count_tables
from kvqueue.history import history_analysis, history_collect, history_diffs, history_present
from kvqueue.params.report_params import ReportSettings
from kvqueue.processed import store
from kvqueue.report import prose, question_sections, questions, sections, writeup
from kvqueue.sources import cache_paths

BASE = "manager:vllm==0.9.2"
WHOLE = "manager:vllm==0.10.0"
SWAP = "manager:vllm==0.9.2+queue=vllm==0.10.0"
RUN = "20261205T103530Z-counts-cp311-0001"
#: Instructions per operation: (baseline, whole, swap). The swap saves half of what the
#: whole saves in sweep100 and a quarter in stream; sweep10 saves nothing at all.
COUNTS = {
    "sweep10": (400_000.0, 400_000.0, 400_000.0),
    "sweep100": (3_000_000.0, 2_000_000.0, 2_500_000.0),
    "stream": (1_000_000.0, 900_000.0, 975_000.0),
}


def _pairs(run: str = RUN, counts: dict = COUNTS) -> pd.DataFrame:
    rows = []
    for case, (base, whole, swap) in counts.items():
        for cand, value in ((WHOLE, whole), (SWAP, swap)):
            rows.append(
                {
                    "host": "h",
                    "interpreter": "CPython 3.11.7",
                    "run_id": run,
                    "case": case,
                    "pool": 2048,
                    "candidate": cand,
                    "baseline": BASE,
                    "candidate_instructions": value,
                    "baseline_instructions": base,
                    "instr_reduction": 1 - value / base,
                    "cycles_reduction": float("nan"),
                }
            )
    return pd.DataFrame(rows)


#: A committed history run's run.json (the make-diffs test relabels its versions).
_HISTORY_JSON = next(
    p
    for p in sorted((Path(__file__).resolve().parent.parent / "data" / "raw").glob("*/*/run.json"))
    if '"question": "history"' in p.read_text()
)


def _data(**tables: pd.DataFrame) -> store.Processed:
    frames = {
        name: pd.DataFrame(columns=list(spec)).astype(spec) for name, spec in store.TABLES.items()
    }
    frames.update(tables)
    return store.Processed(ReportSettings(), **frames)


def _question(data: store.Processed, pair: tuple[str, str]) -> questions.Question:
    return {q.pair: q for q in questions.find(data)}[pair]


def test_labels_name_their_subject() -> None:
    assert schema.subject_of_label(BASE) == schema.SUBJECT_MANAGER
    assert schema.subject_of_label("pool:vllm==0.33.0") == schema.SUBJECT_POOL
    assert schema.subject_of_label("vllm==0.32.0") == schema.SUBJECT_QUEUE
    assert schema.subject_of_label("mine") == schema.SUBJECT_QUEUE


def test_a_counted_manager_pair_opens_with_its_verdict_and_saving_per_request_and_block() -> None:
    data = _data(count_pairs=_pairs())
    q = _question(data, (WHOLE, BASE))
    assert q.subject == schema.SUBJECT_MANAGER
    text = writeup.question_writeup(q)
    opening = text.splitlines()[2]
    assert opening.startswith(f"**`{WHOLE}` executes 10.0–33.3 % fewer instructions")
    assert "sweep100 and stream (2 of 3 cells)" in opening
    assert "below 1% in sweep10 (1 of 3 cells)" in opening
    # The largest request: 1,000,000 instructions saved, 10,000 per block (per op / N).
    assert "per request of 100 blocks (sweep100): 1,000,000 fewer instructions" in opening
    assert "(10,000 per block)" in opening
    (per_request,) = [s for s in question_sections.build(q) if s.key == "per-request"]
    table = per_request.table
    assert table is not None
    row = table[table["Case"] == "sweep100"].iloc[0]
    assert (row["Saving instr/op"], row["Saving instr/block"]) == ("+1,000,000", "+10,000")
    assert table[table["Case"] == "stream"].iloc[0]["Saving instr/block"] == "–"
    assert "Time saving/op [95% CI]" not in table.columns  # no timed run: no time
    # The swap's share of this whole release's saving is named in the whole's writeup.
    assert f"Of this saving, `{SWAP}` explains 25.0% (stream) to 50.0% (sweep100)" in text
    # Only the pair's rows in its answer, although the swap's are in its scoped data.
    (answer,) = [s for s in question_sections.build(q) if s.key == "counts-only"]
    assert answer.table is not None and set(answer.table["Candidate instr/op"]) == {
        "400,000.0",
        "2,000,000.0",
        "900,000.0",
    }


def test_a_swap_writeup_says_what_share_of_the_whole_release_it_explains() -> None:
    data = _data(count_pairs=_pairs())
    text = writeup.question_writeup(_question(data, (SWAP, BASE)))
    assert f"The swap `{SWAP}` explains 25.0% (stream) to 50.0% (sweep100)" in text
    assert f"that `{WHOLE}` saves" in text
    # sweep10: the whole saves nothing there, so no share of it (count_figures: None).
    assert "(3 cells" not in text and "(2 cells" in text


def test_the_cpu_only_section_sets_the_sweeps_beside_the_pr_claim_in_instructions() -> None:
    data = _data(count_pairs=_pairs())
    (limits,) = [
        s for s in question_sections.build(_question(data, (WHOLE, BASE))) if s.key == "cpu-only"
    ]
    assert "GPU time" in limits.note and "batched" in limits.note
    assert "not extrapolated to time to first token" in limits.note
    assert 'vLLM PR #21005 claims "up to ~1 ms TTFT savings"' in limits.note
    assert "sweep10 +0 instructions; sweep100 +1,000,000 instructions" in limits.note
    assert "stream" not in limits.note.split("PR #21005")[1]  # not a request of N blocks
    assert "instructions, not time" in limits.note and "µs" not in limits.note


def test_a_timed_cell_gives_the_saving_in_time_and_none_is_converted_from_instructions() -> None:
    summary = pd.DataFrame(
        {
            "host": ["h"],
            "interpreter": ["CPython 3.11.7"],
            "phase": ["main"],
            "kind": [ab_analysis.PAIR],
            "headline": [True],
            "case": ["sweep100"],
            "pool": [2048],
            "candidate": [WHOLE],
            "baseline": [BASE],
            "baseline_ns": [1_000_000.0],  # 1 ms per request
            "reduction": [0.25],
            "ci_low": [0.2],
            "ci_high": [0.3],
        }
    )
    cells = count_tables.request_savings(_pairs(), summary, WHOLE, BASE)
    timed = cells[cells["case"] == "sweep100"].iloc[0]
    assert (timed["saving_ns"], timed["saving_ns_low"], timed["saving_ns_high"]) == (
        250_000.0,
        200_000.0,
        300_000.0,
    )
    assert cells[cells["case"] == "stream"]["saving_ns"].isna().all()  # counted only
    shown = count_tables.request_savings_table(cells)
    row = shown[shown["Case"] == "sweep100"].iloc[0]
    assert row["Time saving/op [95% CI]"] == "+250.00 µs [+200.00, +300.00]"
    assert row["Time saving/block"] == "+2,500.0 ns"
    note = prose.cpu_only_note(cells)
    assert "sweep100 +1,000,000 instructions / +250.0 µs [+200.0, +300.0]" in note
    assert "paired, 95% CI" in note


def test_the_overview_keeps_the_subjects_apart() -> None:
    queue = _pairs().assign(
        candidate="vllm==0.32.0", baseline="vllm==0.31.0", run_id="20261201T000000Z-q"
    )
    data = _data(count_pairs=pd.concat([queue, _pairs()], ignore_index=True))
    built = {s.key: s for s in sections.build(data)}
    assert "`vllm==0.32.0` vs `vllm==0.31.0`" in built["counts-only"].note
    assert "manager:" not in built["counts-only"].note
    own = built["counts-only-manager"]
    assert own.title.endswith("vLLM's KVCacheManager") and "vllm==0.32.0" not in own.note
    assert own.table is not None and set(own.table["Comparison"]) == {
        f"{WHOLE} vs {BASE}",
        f"{SWAP} vs {BASE}",
    }
    per_request = built["manager-per-request"].table
    assert per_request is not None and len(per_request) == 6


def test_a_manager_writeup_shows_the_manager_cases() -> None:
    data = _data(count_pairs=_pairs())
    q = _question(data, (WHOLE, BASE))
    assert writeup.question_cases(q, ("alloc1", "alloc2", "mix")) == schema.MANAGER_CASES
    assert writeup.question_cases(q, ("sweep100", "alloc1")) == ("sweep100",)
    assert question_sections.forest_name(q) == "forest_manager"


def test_a_manager_bench_of_its_defaults_is_the_full_protocol() -> None:
    def run(subject: str, pools: list[int], cases: tuple[str, ...]) -> SimpleNamespace:
        params = {"subject": subject, "processes": 11, "pools": pools, "cases": list(cases)}
        return SimpleNamespace(meta={"parameters": params, "variants": []})

    full = run("manager", [2048], schema.MANAGER_CASES)
    assert ab_analysis.protocol(full) == ab_analysis.FULL  # type: ignore[arg-type]
    short = run("manager", [2048], ("sweep10",))
    assert ab_analysis.protocol(short).startswith("reduced (cases sweep10 only")  # type: ignore[arg-type]
    queue = run("queue", [2048], schema.CASES)
    assert ab_analysis.protocol(queue) == "reduced (pools 2048 only)"  # type: ignore[arg-type]


def _count_steps(prefix: str, run: str) -> pd.DataFrame:
    rows = []
    for case, change in (("sweep100", -0.25), ("stream", 0.004)):
        rows.append(
            {
                "host": "h",
                "interpreter": "CPython 3.11.7",
                "run_id": run,
                "case": case,
                "pool": 2048,
                "candidate": f"{prefix}vllm==0.10.0",
                "baseline": f"{prefix}vllm==0.9.2",
                "candidate_instructions": 1.0,
                "baseline_instructions": 1.0,
                "instr_reduction": -change,
                "cycles_reduction": float("nan"),
                "release_range": "0.9.2 → 0.10.0",
                "from_version": f"{prefix}vllm==0.9.2",
                "to_version": f"{prefix}vllm==0.10.0",
                "instr_change": change,
            }
        )
    return pd.DataFrame(rows)


def test_a_manager_history_is_its_own_question_section_and_figure() -> None:
    steps = pd.concat(
        [
            _count_steps("", "20261201T000000Z-history-q"),
            _count_steps("manager:", "20261205T000000Z-history-m"),
        ],
        ignore_index=True,
    )
    data = _data(count_steps=steps)
    found = {q.slug: q for q in questions.find(data) if q.kind == questions.HISTORY}
    assert set(found) == {"history", "history-manager"}
    mine = found["history-manager"]
    assert mine.title == "KVCacheManager release history"
    assert mine.subject == schema.SUBJECT_MANAGER
    assert set(mine.data.count_steps["from_version"]) == {"manager:vllm==0.9.2"}
    text = writeup.question_writeup(mine)
    assert "`KVCacheManager` stack" in text and "FreeKVCacheBlockQueue" not in text
    assert "1. **0.9.2 → 0.10.0**" in text
    built = {s.key: s for s in sections.build(data)}
    assert built["history_manager"].title == "KVCacheManager release history"
    assert "20261205T000000Z-history-m" in built["history-counts-manager"].note
    assert "history-m" not in built["history-counts"].note
    assert "history_pool" not in built  # no pool history: no pool section


def test_each_subject_is_its_own_history_family_and_table() -> None:
    def step(version: str, p: float) -> dict[str, object]:
        return {"headline": True, "run_id": "r", "from_version": version, "p_value": p}

    # One manager step at p = 0.03 holds up in its own family; 20 queue steps at p = 0.5
    # in one family with it would lower its threshold to 0.05 / 21.
    rows = [step("manager:vllm==0.9.2", 0.03)] + [step("vllm==0.9.2", 0.5) for _ in range(20)]
    kept = history_analysis.discoveries([{**r, "excludes_0": True} for r in rows], 0.05)
    assert kept[0]["significant"] and not any(r["significant"] for r in kept[1:])
    versions = pd.DataFrame({"version": ["vllm==1.0", "pool:vllm==1.0", "manager:vllm==1.0"]})
    for subject in schema.SUBJECTS:
        (label,) = history_present.of_subject(versions, subject)["version"]
        assert schema.subject_of_label(label) == subject


def test_a_manager_step_diffs_the_files_the_stack_runs(tmp_path: Path) -> None:
    for release, body in (("0.1.0", "a = 1\n"), ("0.2.0", "a = 2\n")):
        folder = tmp_path / f"vllm-{release}"
        folder.mkdir()
        (folder / "kv_cache_utils.py").write_text("class KVCacheBlock:\n    pass\n")
        for member in history_diffs.STACK_FILES[schema.SUBJECT_MANAGER]:
            (folder / member.rsplit("/", 1)[-1]).write_text(body)
    diff = history_diffs.step_diff(
        ["0.1.0"], ["0.2.0"], cache=tmp_path, subject=schema.SUBJECT_MANAGER, max_lines=100
    )
    assert "0.1.0: kv_cache_manager.py" in diff and "0.2.0: block_pool.py" in diff
    assert "kv_cache_manager.py" not in history_diffs.step_diff(
        ["0.1.0"], ["0.2.0"], cache=tmp_path, subject=schema.SUBJECT_POOL, max_lines=100
    )
    assert history_diffs.compared(schema.SUBJECT_MANAGER).startswith("`kv_cache_manager.py`")


def test_make_diffs_fetches_the_files_a_manager_step_diff_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager history's releases are fetched with the manager's files (once), a
    queue history's with kv_cache_utils.py alone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, labels in (("m", ["manager:vllm==0.10.0"]), ("q", ["vllm==0.6.4"])):
        run = tmp_path / "raw" / "h" / f"20261205T00000{len(name)}Z-history-{name}"
        run.mkdir(parents=True)
        meta = json.loads(_HISTORY_JSON.read_text())  # a committed history's, relabelled
        meta["history"]["versions"] = [{"label": x, "releases": [x.split("==")[1]]} for x in labels]
        (run / "run.json").write_text(json.dumps(meta))
    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_members(version: str, members: tuple[str, ...], optional: object) -> dict:
        calls.append((version, members))
        for member in members:
            path = cache_paths.member_cached_path(version, member)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x = 1\n")
        return {}

    def fake_release(version: str) -> Path:
        calls.append((version, ("kv_cache_utils.py",)))
        path = cache_paths.cached_path(version)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
        return path

    monkeypatch.setattr(history_collect, "fetch_members", fake_members)
    monkeypatch.setattr(history_collect, "fetch_release", fake_release)
    raw = tmp_path / "raw"
    assert history_collect.fetch_history_releases(raw, say=lambda _: None) == 2
    fetched = dict(calls)
    assert set(history_diffs.STACK_FILES[schema.SUBJECT_MANAGER]) < set(fetched["0.10.0"])
    assert fetched["0.6.4"] == ("kv_cache_utils.py",)
    assert history_collect.fetch_history_releases(raw, say=lambda _: None) == 0  # cached


def test_a_timed_pool_history_does_not_hide_the_same_hosts_counted_manager_history() -> None:
    from kvqueue.history import history_present

    versions = pd.DataFrame(
        {"host": ["h"], "interpreter": ["py"], "version": ["pool:vllm==0.10.0"], "headline": [1]}
    )
    counts = pd.DataFrame(
        {
            "host": ["h", "h"],
            "interpreter": ["py", "py"],
            "to_version": ["pool:vllm==0.11.0", "manager:vllm==0.11.0"],
        }
    )
    kept = history_present.counts_only_steps(counts, versions)
    assert list(kept["to_version"]) == ["manager:vllm==0.11.0"]


def test_each_version_costs_per_operation_and_per_block_in_release_order() -> None:
    from kvqueue.history import history_present

    counts = pd.DataFrame(
        {
            "host": ["h"] * 4,
            "interpreter": ["py"] * 4,
            "label": ["manager:vllm==0.10.0"] * 2 + ["manager:vllm==0.9.2"] * 2,
            "case": ["sweep100", "stream", "sweep100", "stream"],
            "pool": [2048] * 4,
            "instructions": [2_000_000.0, 50.0, 3_000_000.0, 60.0],
        }
    )
    table = history_present.count_version_table(counts, {"sweep100": 100})
    assert list(table["Version"]) == ["manager:vllm==0.9.2", "manager:vllm==0.10.0"]
    assert list(table["sweep100 / 2,048: per block"]) == ["30,000", "20,000"]
    line = history_present.count_version_line(counts, {"sweep100": 100})
    assert "sweep100: 30,000 (0.9.2) → 20,000 (0.10.0) instructions per block" in line
