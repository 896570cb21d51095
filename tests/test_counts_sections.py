"""Issue 28.3: every run the report finds is shown or named with the reason.

Counts-only runs (``METRIC=instructions`` with no timed run of the same host ×
interpreter) get their sections and writeups: an A/B pair its instruction-count verdict
(a change is 1 % or more, not wall time), a history its release steps by instructions.
An older history counts run is replaced by the newer one. Several policy runs of one host
× interpreter × variant × regime: the section says the newest is shown and names the
others. Built from committed counts runs (``RUNS=``) or from small frames: no valgrind.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from kvqueue.ab import count_tables
from kvqueue.params.report_params import ReportSettings
from kvqueue.processed import store
from kvqueue.rawdata import raw_reader
from kvqueue.report import processed_build, prose, questions, sections, writeup
from kvqueue.stats import count_figures

RAW = Path(__file__).resolve().parent.parent / "data" / "raw"
HOST = "xeon-vm-2core"
#: Committed counts runs of CPython 3.11.7, the interpreter without a timed history.
AB_RUN = "20261201T180338Z-counts-cp311-ce4b"
HISTORY_RUN = "20261201T181244Z-counts-cp311-5037"
POLICY_RUN = "20261201T195852Z-policy-cp311-bef4"


def _build(tmp_path: Path, *runs: str) -> store.Processed:
    settings = ReportSettings(resamples=2000, runs=runs)
    return processed_build.build(RAW, tmp_path / "processed", settings)


def _section(data: store.Processed, key: str) -> sections.Section:
    (found,) = [s for s in sections.build(data) if s.key == key]
    return found


def test_a_counts_only_history_gets_its_section_and_its_writeup(tmp_path: Path) -> None:
    data = _build(tmp_path, HISTORY_RUN)
    history = _section(data, "history")
    assert "No release-history run yet" not in history.note
    assert "Instruction counts only" in history.note
    assert history.figure is None  # no placeholder saying no history was made
    steps = _section(data, "history-counts")
    assert HISTORY_RUN in steps.note and "1. **" in steps.note
    assert steps.table is not None and len(steps.table) == 16  # every step of 17 versions
    (question,) = [q for q in questions.find(data) if q.kind == questions.HISTORY]
    assert question.slug == "history"
    text = writeup.question_writeup(question)
    assert "### Answer" in text and "1. **" in text and "not wall time" in text
    assert "make history" in text and "METRIC=instructions" in text
    used = data.ledger.set_index("run_id").loc[HISTORY_RUN, "use"]
    assert used == "headline"


def test_a_counts_only_ab_pair_gets_its_section_and_a_verdict_writeup(tmp_path: Path) -> None:
    data = _build(tmp_path, AB_RUN)
    only = _section(data, "counts-only")
    assert "`vllm==0.32.0` vs `vllm==0.31.0`" in only.note
    assert "1% or more" in only.note and "not wall time" in only.note
    found = {q.pair: q for q in questions.find(data) if q.kind == questions.AB}
    # The configured pairs this run holds (a timed run would answer the same ones).
    queue_pairs = {pair for pair in data.settings.pairs if not pair[0].startswith("pool:")}
    assert set(found) == queue_pairs
    text = writeup.question_writeup(found[("vllm==0.32.0", "vllm==0.31.0")])
    verdict = next(line for line in text.splitlines() if line.startswith("**`vllm==0.32.0`"))
    assert "instructions per operation" in verdict and "cells:" in verdict
    assert "make bench" in text and "METRIC=instructions" in text
    # Issue 28 (probe): the command repeats the run's own variants, not the defaults.
    assert "VARIANTS='vllm==0.31.0 vllm==0.32.0 kvqueue kvqueue:floor'" in text
    assert "Validation" not in text  # no time section stands in for a timed run


def test_the_verdict_reads_one_percent_either_way_as_a_change() -> None:
    rows = pd.DataFrame(
        {
            "host": "h",
            "interpreter": "CPython 3.12.1",
            "run_id": "r",
            "case": ["alloc1", "alloc2", "mix"],
            "pool": 2048,
            "candidate": "new",
            "baseline": "old",
            "candidate_instructions": [99.5, 98.0, 103.0],
            "baseline_instructions": 100.0,
            "instr_reduction": [0.005, 0.02, -0.03],
        }
    )
    line = count_tables.counts_verdict(rows, "new", "old")
    assert "fewer instructions in 1 (alloc2" in line
    assert "more instructions in 1 (mix" in line
    assert "no change (< 1%) in 1 (alloc1" in line
    assert count_tables.counts_table(rows)["Verdict"].tolist() == [
        "no change (< 1%)",
        "fewer instructions",
        "more instructions",
    ]


def test_an_older_history_counts_run_of_the_same_host_is_replaced() -> None:
    (run,) = raw_reader.read_raw(RAW, strict=False, run_ids=(HISTORY_RUN,)).runs
    newer_meta = {**run.meta, "run_id": HISTORY_RUN.replace("181244Z", "235959Z")}
    newer = dataclasses.replace(run, meta=newer_meta)
    tables, left = count_figures.analyze([run, newer], ())
    assert not left
    assert set(tables["count_steps"]["run_id"]) == {newer_meta["run_id"]}


def test_several_policy_runs_of_one_regime_name_the_ones_not_shown(tmp_path: Path) -> None:
    data = _build(tmp_path, POLICY_RUN)
    table = data.policy
    older = table.assign(run_id=POLICY_RUN.replace("195852Z", "000000Z"), headline=False)
    older = older[older["window"] != "inf"]  # another plan: it had fewer windows
    data = dataclasses.replace(data, policy=pd.concat([table, older], ignore_index=True))
    note = _section(data, "policy").note
    assert "the newest is shown" in note
    assert f"shown {POLICY_RUN}" in note and f"not shown {HOST}/{older['run_id'].iloc[0]}" in note
    assert prose.replaced_policy_runs(table) == ""  # one run per regime: nothing to name
    (question,) = [q for q in questions.find(data) if q.kind == questions.POLICY]
    assert f"not shown {HOST}/{older['run_id'].iloc[0]}" in writeup.question_writeup(question)


def test_a_counts_step_carries_the_label_the_timed_history_gives_it(tmp_path: Path) -> None:
    """Issue 26.2: one label for a step in every table. A counts history counts each
    distinct class once (0.6.5's class is 0.7.3's), so its step from 0.6.4.post1 was
    labelled ``0.6.4.post1 → 0.7.3`` where the timed history says ``0.6.4.post1 → 0.6.5``
    (the first release that shipped the newer class)."""
    data = _build(tmp_path, HISTORY_RUN)
    steps = data.count_steps
    first = steps[steps["from_version"] == "vllm==0.6.4.post1"]
    assert set(first["to_version"]) == {"vllm==0.7.3"}
    assert set(first["release_range"]) == {"0.6.4.post1 → 0.6.5"}
    table = _section(data, "history-counts").table
    assert "0.6.4.post1 → 0.6.5" in set(table["Release step"])
    assert "0.6.4.post1 → 0.7.3" not in set(table["Release step"])
