"""The steady-state policy protocol (docs/design.md §12): engine age in turnovers,
descriptors per READ on two pools, the unpin rule, regimes, traces, the analysis
(settled or not, the net line), the report with and without runs, and the gate first."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import synthetic

from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.formatting import TOO_FEW
from kvqueue.measure import run_folder
from kvqueue.params import policy_params
from kvqueue.params.report_params import ReportSettings
from kvqueue.policy import (
    age_windows,
    churn,
    invariants,
    policies,
    policy_analysis,
    policy_checks,
    policy_collect,
    policy_present,
    trace,
)
from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "data" / "traces" / "example.jsonl"
SMALL = churn.Workload(
    pool=512,
    concurrency=8,
    prefill_median=12.0,
    prefill_max=64,
    decode_median=4.0,
    decode_max=32,
    decode_every=3,
    prefix_share=0.7,
    families=4,
)


def _queue(ids: list[int], pool: int = 32) -> tuple[FreeKVCacheBlockQueue, list[KVCacheBlock]]:
    """A queue over a pool whose free blocks are ``ids`` in this order (the rest held)."""
    blocks = [KVCacheBlock(block_id=i) for i in range(pool)]
    queue = FreeKVCacheBlockQueue(blocks)
    queue.popleft_n(pool)
    queue.append_n([blocks[i] for i in ids])
    return queue, blocks


# ------------------------------------------------------------------ engine age


def test_age_windows_reach_50_and_300_turnovers_by_default() -> None:
    p = policy_params.PolicyParams(host="h")
    edges = age_windows.age_edges(p.warmup_turnovers, p.turnovers)
    assert edges[0] == 0 and edges[-1] == p.turnovers
    # The measurement is the last two windows: its two halves.
    assert edges[-3:] == [p.warmup_turnovers, 300.0, 400.0]
    assert any(lo >= 50 for lo in edges[:-1]) and any(lo >= 300 for lo in edges[:-1])


def test_age_edges_refuse_a_warm_up_past_the_end() -> None:
    with pytest.raises(ValueError, match="below the end"):
        age_windows.age_edges(10, 10)


def test_the_age_is_allocations_over_the_pool() -> None:
    blocks = [KVCacheBlock(block_id=i) for i in range(SMALL.pool)]
    queue = FreeKVCacheBlockQueue(blocks)
    sim = churn.Churn(SMALL, 3, queue, blocks, queue.popleft_n)
    sim.run_until(2.0)
    assert 2.0 <= sim.age < 2.0 + (SMALL.prefill_max + SMALL.concurrency) / SMALL.pool
    assert sim.age == sim.pools.decode.allocated / SMALL.pool


# ------------------------------------------------------------------ descriptors


@pytest.mark.parametrize(
    ("p", "d", "want"),
    [
        ([1, 2, 3], [7, 8, 9], 1),  # both ascending by one: one descriptor
        ([3, 2, 1], [9, 8, 7], 1),  # both descending: adjacent in the same direction
        ([1, 2, 3], [9, 8, 7], 3),  # opposite directions: no merge
        ([1, 2, 3], [7, 9, 10], 2),  # one side breaks once
        ([1, 2, 4, 5], [1, 2, 3, 4], 2),  # the other side breaks
        ([5], [9], 1),
        ([], [], 0),
    ],
)
def test_a_read_merges_only_where_both_ends_are_adjacent(p, d, want) -> None:
    assert churn.descriptors(p, d) == want


def test_one_side_runs_overstate_what_a_read_merges() -> None:
    # The decode side's blocks ascend (one run) while the prefill side's are scattered.
    p, d = [4, 9, 2, 11], [0, 1, 2, 3]
    assert len(policies.ascending_runs(d)) == 1
    assert churn.descriptors(p, d) == 4


def test_a_paired_run_reads_every_admitted_request() -> None:
    sides = {}
    for s in (churn.DECODE, churn.PREFILL):
        blocks = [KVCacheBlock(block_id=i) for i in range(SMALL.pool)]
        queue = FreeKVCacheBlockQueue(blocks)
        sides[s] = (queue, blocks, queue.popleft_n)
    sim = churn.Churn(SMALL, 4, *sides[churn.DECODE], prefill=sides[churn.PREFILL])
    reads = []
    sim.pools.on_read = lambda rid, count, k: reads.append((count, k))
    sim.run(300)
    assert len(reads) == sim.admitted > 20
    assert all(1 <= count <= k for count, k in reads)


# ------------------------------------------------------------------ unpin rule


def test_the_policy_never_puts_a_last_resort_block_in_a_run() -> None:
    # Free queue 10 11 12 13 | 20 21: the best run holds 11, released by an unpin.
    queue, _ = _queue([10, 11, 12, 13, 20, 21, 5, 7])
    got = policies.contiguous(queue, 8, None, threshold=8, last_resort={11})
    ids = [b.block_id for b in got]
    # 12-13 and 20-21 are runs; 10 and 11 only come from the fallback (the head).
    assert ids[:4] == [12, 13, 20, 21]
    assert ids[4:] == [10, 11, 5, 7]


def test_an_empty_last_resort_set_is_the_policy_as_before() -> None:
    for last_resort in ((), set()):
        queue, _ = _queue([10, 11, 12, 13, 20, 21, 5, 7])
        got = policies.contiguous(queue, 4, 4, threshold=4, last_resort=last_resort)
        assert [b.block_id for b in got] == [10, 11, 12, 13]


def test_the_model_and_the_policy_agree_with_last_resort_blocks() -> None:
    import random

    rng = random.Random(7)
    for _ in range(300):
        ids = rng.sample(range(40), 30)
        ids.sort(key=lambda i: i // 5 + rng.random() * 3)
        resort = set(rng.sample(ids, 5))
        n = rng.randint(8, 20)
        queue, _ = _queue(ids, 40)
        got = [b.block_id for b in policies.contiguous(queue, n, 2, 8, resort)]
        assert got == invariants.model(ids, n, 2, 8, resort)


def test_the_check_refuses_a_policy_that_ignores_the_unpin_rule(monkeypatch) -> None:
    original = policies.contiguous

    def ignores(queue, n, window_factor=4, threshold=8, last_resort=()):
        return original(queue, n, window_factor, threshold)

    monkeypatch.setattr(policies, "contiguous", ignores)
    with pytest.raises(invariants.PolicyCheckError, match="put last-resort"):
        invariants.run_check(FreeKVCacheBlockQueue, KVCacheBlock, ["contig-inf"], 8, seed=3)


def test_the_check_sees_last_resort_blocks_on_the_prefill_side() -> None:
    result = invariants.run_check(FreeKVCacheBlockQueue, KVCacheBlock, ["contig-w4"], 8, seed=5)
    assert result["policies"]["contig-w4"]["last_resort_seen"] > 20


# ------------------------------------------------------------------ regimes


def test_the_agentic_regime_has_fewer_larger_allocations() -> None:
    chat = policy_params.from_text({"host": "h", "regime": "chat"})
    agentic = policy_params.from_text({"host": "h", "regime": "agentic"})
    assert agentic.concurrency == 60 and agentic.decode_every == 128
    assert agentic.prefill_median > 10 * chat.prefill_median
    assert chat.prefix_share >= 0.9
    # A variable given with a regime overrides the preset.
    assert (
        policy_params.from_text({"host": "h", "regime": "agentic", "pool": "40000"}).pool == 40000
    )
    for p in (chat, agentic):
        policy_checks.check_values(p)


# ------------------------------------------------------------------ traces


def _run_pass(name: str, events=None, workload: churn.Workload = SMALL, seed: int = 2):
    """One pass (as the worker runs it, without timing concerns): rows and final queue."""
    meter = age_windows.Meter(age_windows.age_edges(1, 3), 8)
    policy = policies.get(name)
    sides = {}
    for s in (churn.DECODE, churn.PREFILL):
        blocks = [KVCacheBlock(block_id=i) for i in range(workload.pool)]
        sides[s] = churn.Side(FreeKVCacheBlockQueue(blocks), blocks, None, workload.free_order)
        sides[s].alloc = meter.wrap(policy, sides[s], s == churn.DECODE)
    pools = churn.Pools(sides[churn.DECODE], sides[churn.PREFILL])
    pools.on_read = meter.on_read
    if events is None:
        sim = churn.Churn(workload, seed, sides[churn.DECODE].queue, [], None)
        sim.pools = pools
        age_windows.synthetic_pass(sim, meter)
    else:
        age_windows.replay_pass(pools, events, workload.pool, meter)
    keys = ("allocations", "blocks", "big_runs", "reads", "descriptors", "desc_p90")
    rows = [{k: r[k] for k in keys} for r in meter.rows()]
    return rows, invariants.free_ids(sides[churn.DECODE].queue)


def test_a_written_trace_replays_exactly_the_synthetic_run(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    count = trace.write_synthetic(path, SMALL, 2, 3.0, FreeKVCacheBlockQueue, KVCacheBlock)
    header, events = trace.read_trace(path)
    assert count == len(events) and header["pool"] == SMALL.pool
    for name in ("lru", "contig-w4"):
        synthetic = _run_pass(name)
        replayed = _run_pass(name, events)
        if name == "lru":
            # The trace was written under lru: the replay is the same run (the same final
            # queue, the same sums; window edges fall on steps in a synthetic pass, on
            # events in a replay, so a few calls near an edge change windows).
            assert replayed[1] == synthetic[1]
            for key in synthetic[0][0]:
                if key != "desc_p90":
                    assert sum(r[key] for r in replayed[0]) == sum(r[key] for r in synthetic[0])
        else:
            # Another policy: the same events, other blocks.
            assert replayed[0][0]["reads"] == synthetic[0][0]["reads"]


def test_the_committed_example_trace_reads_and_replays() -> None:
    header, events = trace.read_trace(EXAMPLE)
    assert header["sides"] == ("d", "p") and 100 < len(events) < 5000
    rows, _ = _run_pass("contig-inf", events, churn.Workload(pool=header["pool"]))
    assert sum(r["reads"] for r in rows) > 20


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (['{"format": "x"}'], "format 'kvqueue-policy-trace'"),
        (['{"format": "kvqueue-policy-trace", "version": 1, "pool": 10}'], "pool must be"),
        (["not json"], "header is not JSON"),
        ([], "no events"),
        (['{"op": "grow", "req": 1}'], "op must be one of"),
        (['{"op": "alloc", "req": 1, "n": -1}'], "n must be a whole number"),
        (['{"op": "free", "req": 1}'], "holds nothing"),
        (['{"op": "alloc", "req": 1, "n": 2, "side": "x"}'], "side must be one of"),
        (['{"op": "touch", "req": 1, "keys": [1.5]}'], "a key must be"),
        (['{"op": "alloc", "req": 1, "n": 2}', '{"op": "read", "req": 1, "n": 2}'], "not live"),
        (['{"op": "alloc", "req": 1, "n": 2}', ""], "blank line"),
    ],
)
def test_a_bad_trace_is_one_line_naming_file_and_line(tmp_path: Path, lines, words) -> None:
    header = '{"format": "kvqueue-policy-trace", "version": 1, "pool": 512, "sides": ["d", "p"]}'
    first = lines[0] if lines and not lines[0].startswith('{"op"') else header
    rest = lines[1:] if lines and first is lines[0] else lines
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([first, *rest]) + "\n", encoding="utf-8")
    with pytest.raises(trace.TraceError, match=re.escape(words)) as info:
        trace.read_trace(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_bad_trace_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": "nope"}\n', encoding="utf-8")
    with pytest.raises(BenchInputError, match="TRACE: "):
        policy_checks.check_values(policy_params.from_text({"host": "h", "trace": str(path)}))


def test_trace_and_trace_out_together_are_refused() -> None:
    with pytest.raises(BenchInputError, match="TRACE and TRACE_OUT"):
        policy_params.from_text({"host": "h", "trace": "a", "trace_out": "b"})


# ------------------------------------------------------------------ analysis and report


def _age_row(policy: str, process: int, lo: float, hi: float, desc: int, ns: int) -> dict:
    return {
        "policy": policy, "window": "0" if policy == "lru" else "4", "order_position": 0,
        "window_from": lo, "window_to": hi, "age_from": lo, "age_to": hi,
        "allocations": 100, "blocks": 1000, "big_allocations": 40, "big_blocks": 800,
        "big_runs": 400 if policy == "lru" else 100, "big_blocks_in_runs": 10,
        "ns_total": ns, "big_ns_total": ns // 2, "prefill_allocations": 10,
        "prefill_ns_total": 0, "reads": 10, "read_blocks": 500, "descriptors": desc,
        "desc_p50": desc // 10, "desc_p90": desc // 5, "admitted": 10, "hit_blocks": 10,
        "prefill_blocks": 100,
    }  # fmt: skip


def _age_run(
    raw: Path,
    run_id: str,
    late: int,
    processes: int = 6,
    host: str = "h",
    scale: float = 1.0,
    regime: str = "chat",
) -> Path:
    """A steady-state run: lru 400 descriptors per 10 READs; contig-w4 200 in the
    first half and ``late`` in the second (and early windows); its ages × ``scale``."""
    record = {
        "kind": "policy", "run_id": run_id, "host": host, "status": "running",
        "started_at": f"2026-01-01T00:00:0{run_id[-1]}+00:00", "protocol": schema.POLICY_PROTOCOL,
        "parameters": {"variant": "kvqueue", "threshold": 8, "regime": regime,
                       "desc_cost_ns": 1000.0},
        "policies": ["lru", "contig-w4"], "trace": None,
        "python": {"implementation": "CPython", "version": "3.12.0"},
        "variants": [{"source": "kvqueue"}],
        "processes_planned": {"main": processes}, "processes_completed": {"main": 0},
        "process_info": [], "schema_version": schema.SCHEMA_VERSION, "ended_at": None,
        "machine": {}, "seeds": {}, "project": {},
    }  # fmt: skip
    writer = run_folder.RunWriter(raw / host / run_id, record, policy_collect.POLICY_TABLE)
    for k in range(1, processes + 1):
        jitter = k % 3  # processes differ a little
        rows = []
        for lo, hi, contig in ((0.0, 1.0, 100), (1.0, 2.0, 200), (2.0, 3.0, late)):
            lo, hi = lo * scale, hi * scale
            rows.append(_age_row("lru", k, lo, hi, 400 + jitter, 10_000 + 10 * jitter))
            rows.append(_age_row("contig-w4", k, lo, hi, contig + jitter, 30_000 + 10 * jitter))
        writer.add_process("main", k, rows, {"process": k})
    writer.save("complete")
    return writer.dir


def _steady(table: pd.DataFrame, metric: str, policy: str = "contig-w4") -> pd.Series:
    hit = table[(table["age"] == policy_analysis.STEADY) & (table["policy"] == policy)]
    return hit[hit["metric"] == metric].iloc[0]


def test_agreeing_halves_settle_and_give_the_net_line(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200)
    table = synthetic.policy_table(raw)
    assert _steady(table, "settled")["estimate"] == 1.0
    assert _steady(table, "desc_reduction")["estimate"] == pytest.approx(2.0, rel=0.02)
    # Saved: (40 - 20) block-runs per READ x 64 KV regions (the run records none: the
    # default) x 1,000 ns; added: (3,000 - 1,000) ns per READ; even at 2,000 / 20,000.
    assert _steady(table, "ns_saved")["estimate"] == pytest.approx(1_280_000, rel=0.02)
    assert _steady(table, "ns_added")["estimate"] == pytest.approx(2_000, rel=0.01)
    assert _steady(table, "net_ns")["estimate"] == pytest.approx(1_278_000, rel=0.03)
    assert _steady(table, "break_even_regions")["estimate"] == pytest.approx(0.1, rel=0.05)
    # The same run priced for one region per block (make report KV_REGIONS=1).
    one = synthetic.policy_table(raw, settings=ReportSettings(kv_regions=1))
    assert _steady(one, "ns_saved")["estimate"] == pytest.approx(20_000, rel=0.02)
    assert _steady(one, "net_ns")["estimate"] == pytest.approx(18_000, rel=0.03)
    shown = policy_present.display_table(table)
    head = "steady state: descriptors per READ ÷ (vs lru)"
    assert shown.loc[shown["policy"] == "contig-w4", head].iloc[0].startswith("2.0")
    note = policy_present.note(table, 0.95)
    assert "net gain" in note
    # The reading is a table row per policy and sentences read off it.
    row = next(line for line in note.splitlines() if line.startswith("| `contig-w4` |"))
    assert "2.00× [" in row and row.endswith("| net gain at 64 regions |")
    assert "1 of 1 windows are a net gain (`contig-w4`)" in note


def test_runs_of_other_lengths_share_the_table_without_empty_cells(tmp_path: Path) -> None:
    # Two steady-state runs with other measurement windows (1-3 and 5-15 turnovers): each
    # row names its own window, and no cell of either is missing (the window in the
    # header left the other run's cells NaN, printed as "nan").
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200, host="a")
    _age_run(raw, "r2", late=200, host="b", scale=5.0)
    shown = policy_present.display_table(synthetic.policy_table(raw))
    assert not shown.isna().any().any()
    assert "nan" not in shown.to_string()
    assert sorted(set(shown["steady state (turnovers)"])) == ["1–3", "5–15"]


def test_the_answer_is_one_reading_per_regime_from_its_longest_run(tmp_path: Path) -> None:
    # Host "a" sorts first but measured agentic to 3 turnovers, "b" to 15; chat only on
    # "b". The first host's readings alone were the answer, which left chat out.
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200, host="a", regime="agentic")
    _age_run(raw, "r2", late=200, host="b", scale=5.0, regime="agentic")
    _age_run(raw, "r3", late=200, host="b", regime="chat")
    table = synthetic.policy_table(raw)
    _method, readings, _older = policy_present.note_parts(table, 0.95)
    shown, folded = policy_present.split_readings(table, readings)
    assert [r.split("**")[1] for r in shown] == [
        "b, CPython 3.12.0, agentic",
        "b, CPython 3.12.0, chat",
    ]
    assert folded == []  # host a is not shown: its figures are in the table
    assert "break-even is " in shown[0]  # one window: no "ranges from x to x"
    # The sentence gives the break-even with the table's interval, not its estimate alone
    # (an unpin run read "break-even is 470.2 regions" beside [42.5, ∞] in the table).
    row = next(ln for ln in shown[0].splitlines() if ln.startswith("| `contig"))
    cell = row.split(" | ")[5]
    assert re.search(r"\[[\d,.]+, ([\d,.]+|∞)\]$", cell), cell
    assert f"break-even is {cell} regions." in shown[0]


def test_disagreeing_halves_are_not_settled(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=350)
    table = synthetic.policy_table(raw)
    assert _steady(table, "settled")["estimate"] == 0.0
    shown = policy_present.display_table(table)
    head = "steady state: descriptors per READ ÷ (vs lru)"
    assert shown.loc[shown["policy"] == "contig-w4", head].iloc[0] == "not settled"
    note = policy_present.note(table, 0.95)
    assert "not settled" in note
    # An unsettled window is never called a steady-state reduction.
    assert "largest steady-state reduction" not in note
    row = next(line for line in note.splitlines() if line.startswith("| `contig-w4` |"))
    assert "not settled (" in row and "× → " in row  # the two halves: its trend
    first, second = re.search(r"not settled \(([\d.]+)× → ([\d.]+)×\)", row).groups()
    assert first != second, row  # a chat run read "not settled (1.00× → 1.00×)"


def test_a_trend_shows_the_digits_that_tell_its_halves_apart() -> None:
    assert policy_present._trend(1.2, 1.1) == "1.20× → 1.10×"
    assert policy_present._trend(1.0012, 0.9981) == "1.001× → 0.998×"
    assert policy_present._trend(1.00012, 1.00049) == "1.0001× → 1.0005×"


def test_one_process_says_too_few_instead_of_not_settled(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200, processes=1)
    table = synthetic.policy_table(raw)
    shown = policy_present.display_table(table)
    head = "steady state: descriptors per READ ÷ (vs lru)"
    cell = shown.loc[shown["policy"] == "contig-w4", head].iloc[0]
    assert cell.startswith("2.0") and cell.endswith(f"[{TOO_FEW}]"), cell
    net = shown.loc[shown["policy"] == "contig-w4", "net ns / request"].iloc[0]
    assert net.endswith(f"[{TOO_FEW}]"), net
    note = policy_present.note(table, 0.95)
    readings = "\n\n".join(note.split("\n\n")[2:])  # after the two method paragraphs
    assert "not settled" not in readings and "within the interval" not in readings
    assert f"settling {TOO_FEW}" in readings


def test_three_processes_settle_but_time_needs_six(tmp_path: Path) -> None:
    # A t interval needs 2 processes; the order-statistic interval of a median 6 at 95 %.
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200, processes=3)
    table = synthetic.policy_table(raw)
    shown = policy_present.display_table(table)
    head = "steady state: descriptors per READ ÷ (vs lru)"
    row = shown[shown["policy"] == "contig-w4"].iloc[0]
    assert "[" in row[head] and TOO_FEW not in row[head], row[head]
    assert row["allocator ns added / request"].endswith(f"[{TOO_FEW}]")
    assert TOO_FEW not in row["posting ns saved / request"]


def test_the_age_curve_has_a_point_per_window_and_policy(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200)
    table = synthetic.policy_table(raw)
    curve = table[(table["age"] != policy_analysis.STEADY) & (table["metric"] == "desc_reduction")]
    assert sorted(set(curve["age"])) == ["0–1", "1–2", "2–3"]
    red = curve[curve["policy"] == "contig-w4"].sort_values("age_from")["estimate"]
    assert list(red.round(1)) == [4.0, 2.0, 2.0]
    fig = policy_present.figure(table)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    line = ax.lines[0]
    assert len(line.get_xdata()) == 3 and ax.get_xscale() == "log"


def _older_policy_run(meta: dict) -> bool:
    """A committed policy run made before the steady-state protocol."""
    return meta.get("kind") == "policy" and "protocol" not in meta


def test_the_report_reads_older_and_steady_runs_together(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _age_run(raw, "r1", late=200)
    old = raw / "h" / "r0"
    old.mkdir(parents=True)
    # An older run, as the committed ones: policy.csv and no protocol.
    found = [
        f.parent
        for f in sorted((REPO_ROOT / "data" / "raw").glob("*/*/run.json"))
        if _older_policy_run(json.loads(f.read_text()))
    ]
    assert found, "no committed older policy run"
    src = found[0]
    meta = json.loads((src / "run.json").read_text())
    meta["host"], meta["run_id"] = "h", "r0"
    (old / "run.json").write_text(json.dumps(meta))
    (old / schema.POLICY_CSV).write_bytes((src / schema.POLICY_CSV).read_bytes())
    table = synthetic.policy_table(raw)
    assert set(table["protocol"]) == {policy_analysis.OLDER_PROTOCOL, schema.POLICY_PROTOCOL}
    text = policy_present.note(table, 0.95)
    assert "Older protocol" in text and "h/r0" in text and "**h, CPython 3.12.0" in text
    shown = policy_present.display_table(table)
    assert set(shown["regime"]) == {"chat"}


def test_the_report_renders_without_any_policy_run() -> None:
    empty = pd.DataFrame(columns=list(policy_analysis.TABLE_COLUMNS))
    assert policy_present.display_table(empty).empty
    assert "No steady-state policy run" in policy_present.note(empty, 0.95)
    assert policy_present.figure(empty).axes


def test_the_older_committed_runs_still_read() -> None:
    table = synthetic.policy_table(REPO_ROOT / "data" / "raw")
    older = policy_present.older_runs(table)
    committed = sorted(
        f"{p.parent.parent.name}/{p.parent.name}"
        for p in (REPO_ROOT / "data" / "raw").glob("*/*/run.json")
        if _older_policy_run(json.loads(p.read_text()))
    )
    assert older == committed


def test_the_default_cost_per_descriptor_is_the_prs() -> None:
    assert policy_params.PolicyParams().desc_cost_ns == pytest.approx(79.6e6 / 23_252, abs=1)
    assert math.isclose(policy_analysis.DEFAULT_DESC_COST_NS, 79.6e6 / 23_252)


# ------------------------------------------------------------------ the gate first


@pytest.mark.slow
def test_a_broken_queue_is_refused_by_the_gate_in_one_line(tmp_path: Path, broken_queue) -> None:
    raw = tmp_path / "raw"
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "policy", "--host", "g", "--raw-dir", str(raw),
         "--python", sys.executable, "--variant", str(broken_queue), "--regime", "custom",
         "--pool", "1024", "--prefill-max", "96", "--decode-max", "32",
         "--warmup-turnovers", "1", "--turnovers", "2", "--processes", "1"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("make policy: policy refused by the bench gate: gate FAIL")
    # ... and says why: the FAIL line, then the first line of the gate's error.
    assert re.search(r"sha256 [0-9a-f]{16}: \S", last), last
    assert not raw.exists()


@pytest.mark.slow
def test_trace_out_then_trace_replays_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "w.jsonl"
    base = [sys.executable, "-m", "kvqueue", "policy"]
    ages = ["--warmup-turnovers", "2", "--turnovers", "4"]
    workload = ["--regime", "custom", "--pool", "1024", "--prefill-max", "96", "--decode-max",
                "32"]  # fmt: skip
    # TRACE_OUT reads the workload and the ages only; the replay, the run's variables
    # and the ages (the trace brings its workload).
    made = subprocess.run(
        [*base, "--trace-out", str(out), *workload, *ages],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    raw = tmp_path / "raw"
    ran = subprocess.run(
        [*base, "--python", sys.executable, "--host", "t", "--raw-dir", str(raw),
         "--variant", "kvqueue", "--trace", str(out), "--windows", "4", "--processes", "2",
         *ages],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    (run_dir,) = (raw / "t").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["trace"]["events"] > 100 and meta["trace"]["header"]["pool"] == 1024
    table = synthetic.policy_table(raw)
    assert set(table["regime"]) == {"trace"}


def test_a_sensitivity_run_is_named_by_what_it_changed() -> None:
    base = policy_params.from_text({"host": "h", "regime": "agentic"})
    assert policy_params.regime_label(base) == "agentic"
    changed = policy_params.from_text(
        {"host": "h", "regime": "agentic", "free_order": "append", "prefix_share": "0.3"}
    )
    assert policy_params.regime_label(changed) == "agentic, free order append, prefix share 0.3"
    meta = {"regime_label": "agentic, free order append", "parameters": {"regime": "agentic"}}
    assert policy_analysis.regime_label(meta) == "agentic, free order append"
    assert policy_analysis.regime_label({**meta, "trace": {"path": "x"}}) == "trace"
