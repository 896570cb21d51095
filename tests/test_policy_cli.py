"""`make policy` / `python -m kvqueue policy`: bad input is one line with nothing
written, and (slow) a tiny run end to end: the run folder, its seal, and the processed
policy table. That the parameters agree with the Makefile, the CLI and its help is
``tests/test_params.py``'s."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic

from kvqueue import __main__ as cli
from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.measure import child, run_folder
from kvqueue.params import policy_params
from kvqueue.policy import policy_analysis, policy_checks, policy_present, policy_worker
from kvqueue.rawdata import git_state
from kvqueue.report import processed_build

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--pool", "1024", "--concurrency", "8", "--prefill-median", "16", "--prefill-max", "96",
    "--decode-median", "4", "--decode-max", "32", "--decode-every", "2", "--families", "4",
    "--warmup-turnovers", "3", "--turnovers", "8", "--processes", "6",
    "--variant", "kvqueue", "--windows", "1 inf", "--regime", "custom",
]  # fmt: skip


def test_policies_follow_the_windows() -> None:
    p = policy_params.from_text({"host": "h", "windows": "2 inf"})
    assert p.policies == ["lru", "contig-w2", "contig-inf"]
    assert p.workload()["pool"] == 16_384 and p.regime == "chat"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({}, "HOST is missing"),
        ({"windows": "0"}, "WINDOWS takes whole numbers"),
        ({"windows": "2 2"}, "windows lists 2 twice"),
        ({"threshold": "x"}, "must be a whole number"),
        ({"pool": "100"}, "workload: prefill_max + decode_max"),
        ({"prefix_share": "1.5"}, "prefix_share"),
        ({"nonsense": "1"}, "unknown parameter"),
    ],
)
def test_bad_policy_input_is_one_line(given: dict, words: str) -> None:
    given = given if words.startswith("HOST") else {"host": "h", **given}
    with pytest.raises(BenchInputError, match=re.escape(words)):
        policy_checks.check_values(policy_params.from_text(given))


def test_the_workload_is_checked_by_the_policy_checks() -> None:
    """The churn workload's own check needs the policy modules: params cannot run it."""
    p = policy_params.from_text({"host": "h", "pool": "100"})
    with pytest.raises(BenchInputError, match="workload: prefill_max"):
        policy_checks.check_values(p)


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    raw = tmp_path / "raw"
    code = cli.main(["policy", "--host", "h", "--windows", "0", "--raw-dir", str(raw)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("make policy: ")
    assert not raw.exists()


@pytest.mark.slow
def test_a_tiny_policy_run_end_to_end(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "policy", "--host", "tiny", "--raw-dir", str(raw),
         "--python", sys.executable, *TINY],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # Issue 28.1: before the gate, the run names what it was given beyond the defaults.
    (shown,) = [ln for ln in proc.stderr.splitlines() if "not at their defaults" in ln]
    assert shown.startswith("make policy: parameters not at their defaults: HOST=tiny")
    assert "TURNOVERS=8" in shown and f"RAW_DIR={raw}" in shown
    (run_dir,) = (raw / "tiny").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["kind"] == "policy" and meta["status"] == "complete"
    assert meta["workload"]["pool"] == 1024 and meta["seeds"]["run"] == 1
    assert meta["variants"][0]["check"]["ok"]
    assert meta["processes_completed"]["main"] == 6
    runs = synthetic.policy_runs(raw)
    assert len(runs) == 1 and runs[0]["altered"] is None
    assert meta["protocol"] == schema.POLICY_PROTOCOL and meta["age_edges"][-1] == 8
    assert meta["gate"][0]["ok"]
    windows = len(meta["age_edges"]) - 1
    assert len(runs[0]["rows"]) == 6 * 3 * windows
    table = synthetic.policy_table(raw)
    assert set(table["policy"]) == {"lru", "contig-w1", "contig-inf"}
    steady = table[table["age"] == "steady"]
    red = steady[(steady["policy"] == "contig-inf") & (steady["metric"] == "runs_reduction")]
    assert float(red["estimate"].iloc[0]) > 1.0
    assert (
        "not settled" in policy_present.display_table(table).to_string()
        or (steady[steady["metric"] == "settled"]["estimate"] == 1.0).all()
    )
    # An edited policy_age.csv is left out (altered), never read into the table.
    csv_path = run_dir / schema.POLICY_AGE_CSV
    csv_path.write_text(csv_path.read_text().replace(",lru,", ",lru,", 1) + "\n")
    assert synthetic.policy_runs(raw)[0]["altered"]
    assert synthetic.policy_table(raw).empty


# ------------------------------------------------------------------ review fixes


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"windows": "01"}, "without leading zeros"),
        ({"windows": "1 inf ²"}, "WINDOWS takes whole numbers"),
        ({"threshold": "600"}, "above prefill_max 128"),
        ({"threshold": "600", "regime": "custom"}, "above prefill_max 512"),
        ({"regime": "batch"}, "REGIME must be one of"),
        ({"warmup_turnovers": "50", "turnovers": "40"}, "must be below TURNOVERS"),
        ({"free_order": "shuffle"}, "free_order must be one of"),
    ],
)
def test_more_bad_policy_input_is_one_line(given: dict, words: str) -> None:
    with pytest.raises(BenchInputError, match=re.escape(words)):
        policy_checks.check_values(policy_params.from_text({"host": "h", **given}))


def test_any_whole_window_is_a_policy_the_workers_resolve() -> None:
    p = policy_params.from_text({"host": "h", "windows": "3 1000"})
    assert p.policies == ["lru", "contig-w3", "contig-w1000"]
    result = policy_worker.run_check_spec(
        {"source": "kvqueue", "policies": ["lru", "contig-w3"], "threshold": 8, "seed": 2}
    )
    assert result["ok"] and result["policies"]["contig-w3"]["big"] >= 20


def _no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # check_policy probes PYTHON in a subprocess; the variant check is what is tested.
    monkeypatch.setattr(
        policy_checks, "check_python", lambda python: (sys.executable, {"tag": "t"})
    )


@pytest.mark.parametrize(
    ("variant", "words"),
    [("vllm==0.25.0", "lacks iter_blocks_after"), ("vllm==0.9.2", "head-tail")],
)
def test_a_variant_without_the_policy_api_is_refused(
    variant: str, words: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_probe(monkeypatch)
    with pytest.raises(BenchInputError, match=re.escape(words)):
        policy_checks.check(policy_params.from_text({"host": "h", "variant": variant}))
    capsys.readouterr()  # with an empty release cache the check above fetched: its line
    raw = tmp_path / "raw"
    code = cli.main(["policy", "--host", "h", "--variant", variant, "--raw-dir", str(raw)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0]
    assert not raw.exists()


def test_the_worker_refuses_a_bad_spec_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(child, "die_with_parent", lambda: None)
    for policies, source, words in (
        (["lru", "contig-w01"], "kvqueue", "unknown policy 'contig-w01'"),
        (["lru", "contig-w4"], "vllm==0.25.0", "lacks iter_blocks_after"),
    ):
        spec = {"source": source, "policies": policies, "threshold": 8, "seed": 1}
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(spec)))
        assert policy_worker.main(["--check"]) == 2
        out = capsys.readouterr()
        err = out.err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and not out.out


def _row(policy: str, window: str, process: int, big_blocks: int, big_ns: int) -> dict:
    f = 1 + 0.01 * process  # processes differ a little, the paired ratios do not
    return {
        "policy": policy, "window": window, "order_position": 0, "allocations": 100,
        "blocks": 1000, "runs": 500, "big_allocations": 40, "big_blocks": big_blocks,
        "big_runs": 200 if policy == "lru" else 80, "big_blocks_in_runs": 400,
        "big_passed_over": 0, "big_rank_excess": 0.0, "big_scanned": 0, "admitted": 10,
        "completed": 9, "prefill_blocks": 1000, "hit_blocks": 100,
        "ns_total": round(100_000 * f), "big_ns_total": round(big_ns * f),
    }  # fmt: skip


def _older_rows_text(rows: list[dict]) -> str:
    head = ",".join(schema.POLICY_COLUMNS)
    body = [",".join(str(r[c]) for c in schema.POLICY_COLUMNS) for r in rows]
    return "\n".join([head, *body]) + "\n"


#: ``policy.csv`` as runs of the older protocol wrote it (still read, never written).
OLDER_TABLE = run_folder.RunTable(
    schema.POLICY_CSV, _older_rows_text, lambda process, phase, row: {"process": process, **row}
)


def _policy_run(raw: Path, run_id: str, variant: str, processes: int = 5) -> Path:
    """A run of the older protocol (``policy.csv``, warm-up in engine steps)."""
    record = {
        "kind": "policy", "run_id": run_id, "host": "h", "status": "running",
        "started_at": f"2026-01-01T00:00:0{run_id[-1]}+00:00",
        "parameters": {"variant": variant, "threshold": 8},
        "policies": ["lru", "contig-w1", "contig-inf"],
        "python": {"implementation": "CPython", "version": "3.11.0"},
        "variants": [{"source": variant}],
        "processes_planned": {"main": processes}, "processes_completed": {"main": 0},
        "process_info": [], "schema_version": schema.SCHEMA_VERSION, "ended_at": None,
        "machine": {}, "seeds": {}, "project": {},
    }  # fmt: skip
    writer = run_folder.RunWriter(raw / "h" / run_id, record, OLDER_TABLE)
    for k in range(1, processes + 1):
        # contig takes 1.5x the blocks per >= 8 allocation of lru (other prefix hits) in
        # 1.2x the time: slower per allocation, faster per block.
        rows = [
            _row("lru", "0", k, 800, 80_000),
            _row("contig-w1", "1", k, 1200, 96_000),
            _row("contig-inf", "inf", k, 1200, 120_000),
        ]
        writer.add_process("main", k, rows, {"process": k})
    writer.save("complete")
    return writer.dir


def _metric(table, name: str, metric: str) -> float:
    hit = table[(table["policy"] == name) & (table["metric"] == metric)]
    assert len(hit) == 1, (name, metric)
    return float(hit["estimate"].iloc[0])


def test_time_per_block_pairs_allocations_of_other_sizes(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _policy_run(raw, "r1", "kvqueue")
    table = synthetic.policy_table(raw)
    assert _metric(table, "contig-w1", "big_ns_ratio") == pytest.approx(1.2)
    assert _metric(table, "contig-w1", "big_block_ns_ratio") == pytest.approx(0.8)
    assert _metric(table, "lru", "ns_per_big_block") == pytest.approx(100 * 1.03)
    # Older protocol: analysed as before, named in one line, not in the steady-state table.
    assert set(table["protocol"]) == {policy_analysis.OLDER_PROTOCOL}
    assert policy_present.display_table(table).empty
    text = policy_present.note(table, 0.95)
    assert "Older protocol" in text and "h/r1" in text and "No steady-state" in text


def test_a_policy_run_that_differs_from_its_commit_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = tmp_path / "raw"
    _policy_run(raw, "r1", "kvqueue")
    assert not synthetic.policy_table(raw, git_states={"h/r1": "committed"}).empty
    # Edited and re-sealed (digests recomputed): only git can tell.
    assert synthetic.policy_table(raw, git_states={"h/r1": "modified"}).empty
    # The build applies the same rule, and its ledger names the run.
    monkeypatch.setattr(git_state, "git_states", lambda raw_dir: {"h/r1": "modified"})
    data = processed_build.build(raw, tmp_path / "processed")
    assert data.policy.empty
    (row,) = data.ledger.itertuples()
    assert row.use == "left out" and "git" in row.reason


def test_the_figure_without_a_steady_state_run_says_so(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _policy_run(raw, "r1", "kvqueue")
    fig = policy_present.figure(synthetic.policy_table(raw))
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("No steady-state policy run" in t for t in texts)


def test_an_older_policy_run_that_a_newer_one_replaces_is_named_not_shown(tmp_path: Path) -> None:
    """Two policy runs of one host × interpreter × variant: the report shows the newer
    one, and the ledger says so of the older instead of calling it "shown"."""
    raw = tmp_path / "raw"
    _policy_run(raw, "r1", "kvqueue")
    _policy_run(raw, "r2", "kvqueue")
    data = processed_build.build(raw, tmp_path / "processed")
    uses = dict(zip(data.ledger["run_id"], data.ledger["use"], strict=True))
    assert uses == {"r1": "superseded", "r2": "headline"}
    reason = data.ledger.set_index("run_id").loc["r1", "reason"]
    assert reason.startswith("not shown: a newer policy run")
