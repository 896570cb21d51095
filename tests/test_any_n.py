"""Any batch size (issue 36, item 1): ``allocN``, ``popleftN``, ``loopN`` and ``sweepN`` of
any N >= 1, parsed by one helper (:func:`kvqueue.schema.case_size`), accepted wherever a
case is, sorted by N within their family, gated at the N measured, and refused in one
line, before anything is written, when misspelled or when the pool cannot hold N.

The fast tests run the parameters, the runners, the gate and the report's tables in this
process; the slow one counts ``alloc500`` and ``popleft500`` on a 5,000-block pool under
cachegrind through ``make regress``'s command.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import synthetic

from kvqueue import __main__ as cli
from kvqueue import schema
from kvqueue.ab import ab_tables
from kvqueue.errors import GateRefused
from kvqueue.gate import size_check
from kvqueue.measure import runner
from kvqueue.params import bench_params, report_params
from kvqueue.report import processed_build
from kvqueue.sources import loader
from kvqueue.subjects import manager_cases, pool_cases, queue_cases

REPO_ROOT = Path(__file__).resolve().parent.parent
GOOD = REPO_ROOT / "tests" / "queues" / "good.py"
SUBJECTS = REPO_ROOT / "kvqueue" / "subjects"

# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("case", "family", "n", "subject"),
    [
        ("alloc1", "alloc", 1, "queue"),
        ("alloc500", "alloc", 500, "queue"),
        ("alloc100000", "alloc", 100_000, "queue"),
        ("popleft1", "popleft", 1, "queue"),
        ("popleft500", "popleft", 500, "queue"),
        ("loop7", "loop", 7, "pool"),
        ("loop3000", "loop", 3000, "pool"),
        ("sweep5", "sweep", 5, "manager"),
    ],
)
def test_a_sized_case_of_any_n_parses_for_its_subject_alone(
    case: str, family: str, n: int, subject: str
) -> None:
    assert schema.case_size(case) == n == schema.case_size(case, family)
    assert schema.case_family(case) == family
    assert schema.subject_of_case(case) == subject
    assert [s for s in schema.SUBJECTS if schema.is_case(s, case)] == [subject]
    # Each subject's cases module answers through the one parser.
    assert queue_cases.is_case(case) == (subject == "queue")
    assert pool_cases.is_case(case) == (subject == "pool")
    assert manager_cases.is_case(case) == (subject == "manager")
    assert queue_cases.batch_size(case) == (n if subject == "queue" else None)
    assert pool_cases.loop_size(case) == (n if subject == "pool" else None)
    assert manager_cases.sweep_size(case) == (n if subject == "manager" else None)


@pytest.mark.parametrize(
    "case", ["alloc0", "alloc01", "alloc-3", "allocx", "alloc", "loop", "alloc²", "alloc+5",
             "alloc 5", "alloc1234567890", "popleft0", "sweep05", "Alloc5"]
)  # fmt: skip
def test_odd_spellings_are_no_case(case: str) -> None:
    assert schema.case_size(case) is None
    assert schema.subject_of_case(case) is None
    assert not any(schema.is_case(s, case) for s in schema.SUBJECTS)


@pytest.mark.parametrize(
    ("case", "subject", "words"),
    [
        ("alloc0", "queue", "N of alloc<N> is a whole number from 1"),
        ("alloc01", "queue", "without a sign or leading zero (e.g. alloc500)"),
        ("alloc-3", "queue", "N of alloc<N>"),
        ("allocx", "queue", "N of alloc<N>"),
        ("loop", "queue", "choose from alloc<N> popleft<N> mix popappend remove"),
        ("loop", "pool", "N of loop<N> is a whole number from 1"),
        ("loop10", "queue", "it is a case of subject pool (SUBJECT=pool)"),
        ("alloc8", "pool", "it is a case of subject queue (SUBJECT=queue)"),
    ],
)
def test_odd_spellings_are_refused_in_one_line_before_anything_runs(
    case: str, subject: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["quick", "--subject", subject, "--cases", case]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"make quick: unknown case(s) {case} of subject {subject}: "), err
    assert words in err[0]


def test_the_defaults_stay_the_fixed_lists() -> None:
    queue = bench_params.make_params(host="h")
    assert queue.cases == schema.CASES == ("alloc1", "alloc2", "alloc8", "alloc32", "mix",
                                           "popappend", "remove")  # fmt: skip
    pool = bench_params.make_params(host="h", subject="pool")
    assert pool.cases == schema.POOL_CASES
    assert schema.POOL_CASES == ("loop10", "loop50", "loop100", "loop500", "loop1000", "churn")
    manager = bench_params.make_params(host="h", subject="manager")
    assert manager.cases == schema.MANAGER_CASES


def test_any_n_is_accepted_by_every_command_s_parameters() -> None:
    from kvqueue.params import history_params, regression_params

    p = bench_params.make_params(host="h", cases=["alloc500", "popleft500"], pools=[5000])
    assert p.cases == ("alloc500", "popleft500")
    assert bench_params.make_params(host="h", subject="pool", cases=["loop7"]).cases == ("loop7",)
    assert bench_params.make_params(host="h", subject="manager", cases=["sweep7"]).cases == (
        "sweep7",
    )
    history = history_params.from_text({"host": "h", "cases": "alloc500 popleft3", "pools": "5000"})
    assert history.cases == ("alloc500", "popleft3")
    regress = regression_params.from_text(
        {"base": "kvqueue", "head": "kvqueue:floor", "cases": "alloc500", "pools": "5000"}
    )
    assert regress.bench.cases == ("alloc500",) and regress.bench.pools == (5000,)


# ------------------------------------------------------------------ order


def test_tables_sort_an_unknown_n_by_n_within_its_family() -> None:
    cases = "stream sweep3 loop10 churn loop7 remove mix popleft500 popleft1 alloc500 alloc32"
    cases += " alloc1 sweep1000 loop1000 nope"
    ordered = "alloc1 alloc32 alloc500 popleft1 popleft500 mix remove loop7 loop10 loop1000"
    ordered += " churn sweep3 sweep1000 stream nope"
    assert sorted(cases.split(), key=schema.case_key) == ordered.split()
    # The default lists keep their order.
    assert sorted(schema.ALL_CASES, key=schema.case_key) == list(schema.ALL_CASES)


def test_titles_and_cycles_name_any_n() -> None:
    assert ab_tables.case_title("alloc1") == "Singleton allocation/free (alloc1)"
    assert ab_tables.case_title("alloc32") == "32-block allocation/free (alloc32)"
    assert ab_tables.case_title("alloc500") == "500-block allocation/free (alloc500)"
    assert ab_tables.case_title("popleft500") == "popleft_n(500) alone (popleft500)"
    assert ab_tables.case_title("loop7") == "BlockPool: get_new_blocks(7) + free_blocks (loop7)"
    assert "one request of 7 blocks" in ab_tables.case_title("sweep7")
    assert ab_tables.case_cycle("alloc500") == (
        "one cycle = `blocks = q.popleft_n(500); q.append_n(blocks)`"
    )
    assert "`q.popleft_n(500)` alone" in ab_tables.case_cycle("popleft500")
    assert "untimed" in ab_tables.case_cycle("popleft500")
    assert "get_new_blocks(7)" in ab_tables.case_cycle("loop7")


def test_the_report_reads_and_orders_runs_of_any_n(tmp_path: Path) -> None:
    """A run of alloc500, popleft7 and alloc1 on a 5,000-block pool is read (the sample
    reader takes any N), analysed and shown in table order."""
    raw = tmp_path / "raw"
    cases = ("popleft7", "alloc500", "mix", "alloc1", "alloc32")
    synthetic.write_run(raw, cases=cases, confirm_processes=0, pools=(5000,), processes=6)
    settings = report_params.ReportSettings(resamples=200)
    data = processed_build.build(raw, tmp_path / "processed", settings)
    present = ab_tables.present_cases(data, "main")
    assert present == ["alloc1", "alloc32", "alloc500", "popleft7", "mix"]
    table = ab_tables.results_table(data, present)
    # Per comparison (two here: the defaults' pairs), the cases in table order.
    assert list(table["Case"]) == present * 2
    # A stack comparison shows its defaults and any other N it measured.
    assert "loop7" not in ab_tables.subject_cases(data, "pool")


def test_a_queue_run_of_other_cases_is_sized_for_them() -> None:
    sized = runner.bench_sizing_targets({"parameters": {"cases": ["alloc500", "popleft500"]}})
    assert sized[1] == ("alloc500", "popleft500")
    headline = runner.bench_sizing_targets({"parameters": {"cases": ["alloc500", "alloc1"]}})
    assert headline[1] == ("alloc1", "alloc2", "mix")


def test_make_report_cases_take_any_subject_and_n(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvqueue.report import writeup

    assert cli._report_cases("alloc500 popleft7 loop7 sweep3") == (
        "alloc500", "popleft7", "loop7", "sweep3",
    )  # fmt: skip
    out = tmp_path / "out"
    assert (
        cli.main(["report", "--raw-dir", str(tmp_path), "--out", str(out), "--cases", "alloc01"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown case 'alloc01'" in err[0] and "N of alloc<N>" in err[0]
    assert not out.exists()
    # Each writeup takes its subject's cases among them (the queue's: the headline ones
    # when none is the queue's).
    queue = SimpleNamespace(subject="queue", data=None)
    assert writeup.question_cases(queue, ("alloc500", "loop7")) == ("alloc500",)
    assert writeup.question_cases(queue, ("loop7",)) == ab_tables.HEADLINE_CASES
    pool = SimpleNamespace(subject="pool", data=None)
    assert writeup.question_cases(pool, ("alloc500", "loop7")) == ("loop7",)


# ------------------------------------------------------------------ pools too small


@pytest.mark.parametrize(
    ("command", "extra", "words"),
    [
        ("bench", ["--host", "h", "--cases", "alloc500", "--pools", "64"],
         "case alloc500 needs pools of at least 500 blocks (N = 500), got 64"),
        ("bench", ["--host", "h", "--cases", "popleft2048", "--pools", "2048 1000"],
         "case popleft2048 needs pools of at least 2,048 blocks (N = 2,048), got 1,000"),
        ("quick", ["--cases", "alloc1 alloc500", "--pools", "64"],
         "case alloc500 needs pools of at least 500 blocks (N = 500), got 64"),
        ("history", ["--host", "h", "--cases", "alloc500", "--pools", "100"],
         "case alloc500 needs pools of at least 500 blocks (N = 500), got 100"),
        ("quick", ["--subject", "pool", "--cases", "loop3000", "--pools", "2048"],
         "case loop3000 needs pools of at least 3,001 blocks (N = 3,000), got 2,048"),
        ("quick", ["--subject", "manager", "--cases", "sweep5000"],
         "case sweep5000 needs pools of at least 5,001 blocks (N = 5,000), got 2,048"),
    ],
)  # fmt: skip
def test_a_pool_too_small_for_n_is_refused_in_one_line_with_nothing_written(
    command: str, extra: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    args = [command, *extra]
    if command in ("bench", "history"):
        args += ["--raw-dir", str(raw)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"make {command}: {words}"]
    assert list(raw.iterdir()) == []


def test_regress_refuses_a_pool_too_small_before_out_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "regress.md"
    argv = ["regress", "--base", "kvqueue", "--head", "kvqueue:floor", "--cases", "alloc500"]
    assert cli.main([*argv, "--pools", "64", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "make regress: case alloc500 needs pools of at least 500 blocks (N = 500), got 64"
    ]
    assert not out.exists()


# ------------------------------------------------------------------ the runners


@pytest.fixture
def our_queue_pool():
    (variant,) = loader.load_variants(["kvqueue"])

    def make(size: int):
        blocks = [variant.block_cls(block_id=i) for i in range(size)]
        return variant.queue_cls(list(blocks)), blocks

    return make


def _ids(q) -> list[int]:
    return [b.block_id for b in q.get_all_free_blocks()]


@pytest.mark.parametrize(("n", "pool", "loops"), [(1, 64, 200), (7, 64, 30), (500, 5000, 23),
                                                  (5000, 5000, 3), (3, 2048, 1000)])  # fmt: skip
def test_popleft_n_puts_the_blocks_back_as_alloc_n_leaves_them(
    our_queue_pool, n: int, pool: int, loops: int
) -> None:
    a, a_blocks = our_queue_pool(pool)
    b, b_blocks = our_queue_pool(pool)
    queue_cases.make_runner(f"alloc{n}", a, a_blocks, 1)(loops)
    assert queue_cases.make_runner(f"popleft{n}", b, b_blocks, 1)(loops) > 0
    assert b.num_free_blocks == pool and _ids(a) == _ids(b)
    assert all(blk.prev_free_block is not None for blk in b_blocks)


@pytest.mark.parametrize(
    "source", ["kvqueue", "kvqueue:floor", str(GOOD), str(REPO_ROOT / "tests/queues/headtail.py")]
)
@pytest.mark.parametrize("case", ["alloc3", "alloc64", "popleft1", "popleft5", "popleft64"])
def test_every_sized_cycle_is_balanced_on_every_structure(source: str, case: str) -> None:
    """After any number of cycles the queue holds its whole pool again, in the order
    ``allocN`` leaves it (a head-tail queue of vLLM < 0.10.0 through its adapter too)."""
    (variant,) = loader.load_variants([source], block_source="kvqueue")
    orders = []
    for family in ("alloc", "popleft"):
        blocks = [variant.block_cls(block_id=i) for i in range(64)]
        q = variant.queue_cls(blocks)
        n = schema.case_size(case)
        assert queue_cases.make_runner(f"{family}{n}", q, blocks, 1)(7) >= 0
        free = q.get_all_free_blocks()
        assert len(free) == 64 == q.num_free_blocks
        orders.append([b.block_id for b in free])
    assert orders[0] == orders[1]


def test_popleft_n_pops_in_stretches_and_its_last_call_gives_nothing_back(
    our_queue_pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert queue_cases.popleft_stretch(1, 64) == 64
    assert queue_cases.popleft_stretch(1, 100_000) == queue_cases.STRETCH_BLOCKS
    assert queue_cases.popleft_stretch(500, 5000) == 2
    assert queue_cases.popleft_stretch(5000, 5000) == 1
    q, blocks = our_queue_pool(5000)
    calls: list[tuple[str, int, int]] = []
    real_pop, real_give = q.popleft_n, q.append_n

    class Watched:
        """The queue, its calls recorded with the free count they found."""

        def __getattr__(self, name):
            return getattr(q, name)

        def popleft_n(self, k):
            calls.append(("pop", k, q.num_free_blocks))
            return real_pop(k)

        def append_n(self, got):
            calls.append(("give", len(got), q.num_free_blocks))
            return real_give(got)

    run = queue_cases.make_runner("popleft500", Watched(), blocks, 1)
    run(5)
    # Two calls per stretch from the full queue, then both lists back; the odd one alone.
    stretch = [("pop", 500), ("pop", 500), ("give", 500), ("give", 500)]
    assert [c[:2] for c in calls] == [*stretch, *stretch, ("pop", 500), ("give", 500)]
    assert calls[0][2] == calls[4][2] == 5000
    calls.clear()
    run(10, last=True)  # a counted target: one stretch, nothing given back
    assert calls == [("pop", 500, 5000 - 500 * k) for k in range(10)]
    assert q.num_free_blocks == 0


def test_counted_operations_of_a_large_n_are_bounded_and_fit_the_pool() -> None:
    from kvqueue.measure import cachegrind

    # The default cases count as before (check-queue's reference is theirs).
    for case in schema.CASES:
        assert queue_cases.warmup_ops(case, cachegrind.WARMUP_OPS) == cachegrind.WARMUP_OPS
        assert queue_cases.target_ops(case, 2048, cachegrind.TARGET_OPS) == cachegrind.TARGET_OPS
    # A larger N moves at most alloc32's blocks; popleftN one stretch the pool holds.
    assert queue_cases.target_ops("alloc500", 5000, cachegrind.TARGET_OPS) == 1280
    assert queue_cases.warmup_ops("alloc500", cachegrind.WARMUP_OPS) == 128
    assert cachegrind.target_loops("popleft500", 5000) == 10
    assert cachegrind.target_loops("popleft1", 64) == 64
    assert cachegrind.target_loops("popleft1", 100_000) == cachegrind.TARGET_OPS
    assert cachegrind.target_loops("alloc100000", 100_000) == queue_cases.MIN_COUNTED_OPS


# ------------------------------------------------------------------ the gate at N


@pytest.fixture(scope="module")
def long_pop(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A queue broken only when ``popleft_n`` takes more than 300 blocks: the popped
    blocks keep their back link (the tests' correct queue, that one edit)."""
    text = GOOD.read_text(encoding="utf-8")
    clear = "            curr.prev_free_block = None\n            curr.next_free_block = None\n"
    assert text.count(clear) == 1
    broken = text.replace(
        clear,
        "            if n <= 300:\n                curr.prev_free_block = None\n"
        "            curr.next_free_block = None\n",
    ).replace("class FreeKVCacheBlockQueue:", "class LongPopKeepsBackLinks:")
    path = tmp_path_factory.mktemp("long-pop") / "long_pop.py"
    path.write_text(broken, encoding="utf-8")
    return f"{path}::LongPopKeepsBackLinks"


def _validate(sources: list[str], cases: str, sizes: str = "64 5000") -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["validate", "--json", "--ops", "4000", "--sizes", sizes,
                           "--cases", cases, *sources])  # fmt: skip
    return status, json.loads(out.getvalue())


def test_the_gate_runs_at_the_n_measured(long_pop: str) -> None:
    status, doc = _validate([str(GOOD), long_pop], "alloc1 alloc32 mix")
    assert status == 0 and doc["batches"] == [1, 2, 8, 32]
    assert all(r["ok"] and r["batches"] == [] for r in doc["results"])
    status, doc = _validate([str(GOOD), long_pop], "alloc1 alloc500")
    assert status == 1 and doc["batches"] == [1, 500]
    base, broken = doc["results"]
    assert base["ok"] and base["sizes"] == [64, 5000] and base["batches"] == [500]
    assert not broken["ok"] and broken["failed_size"] == 5000 and broken["sizes"] == [64]
    first = broken["error"].splitlines()[0]
    assert re.match(r"size 5000: operation #\d+ popleft_n\(500\): block \d+ is not in the "
                    r"queue but its links are not cleared", first), first  # fmt: skip
    # popleftN is measured at its N too; at 64 blocks the pop takes all there is.
    status, doc = _validate([str(GOOD), long_pop], "popleft301", sizes="64")
    assert status == 0
    status, doc = _validate([str(GOOD), long_pop], "popleft301", sizes="64 2048")
    assert status == 1 and doc["results"][1]["failed_size"] == 2048


def test_the_size_check_pops_and_gives_back_n_at_every_size() -> None:
    (variant,) = loader.load_variants([str(GOOD)])
    seen: dict[int, set[tuple[str, int]]] = {}
    real = size_check._SizedRun.step

    def step(self):
        real(self)
        kind = self.where.split(" ", 2)[2]
        match = re.match(r"(popleft_n|append_n|prepend_n)\((\d+|\[.*\])\)$", kind)
        if match:
            arg = match.group(2)
            length = int(arg) if arg.isdigit() else len(json.loads(arg))
            seen.setdefault(self.size, set()).add((match.group(1), length))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(size_check._SizedRun, "step", step)
        for size in (64, 5000):
            size_check.size_check(variant, size, ops=3000, batches=(500,))
    assert ("popleft_n", 500) in seen[5000]
    assert ("append_n", 500) in seen[5000] or ("prepend_n", 500) in seen[5000]
    assert ("popleft_n", 64) in seen[64]  # as many as the queue holds
    # The default lengths draw the same operations as before.
    assert size_check.long_batch_period((), 15_000) == 0
    assert size_check.long_batch_period((500,), 15_000) == 37


def test_the_runner_gates_a_queue_run_at_its_cases(
    long_pop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runner.run_gate``'s command, run in this process: ``--cases`` carries the run's
    cases, so a queue broken above 300 blocks is refused for alloc500, not alloc32."""
    commands: list[list[str]] = []

    def run_child(cmd: list[str], **_: object) -> SimpleNamespace:
        commands.append(cmd)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(cmd[cmd.index("kvqueue") + 1 :])
        return SimpleNamespace(stdout=out.getvalue(), stderr=err.getvalue(), returncode=status)

    monkeypatch.setattr(runner, "run_child", run_child)
    common = {"host": "h", "variants": [str(GOOD), long_pop], "pools": [5000], "gate_ops": 4000}
    ok = bench_params.make_params(**common, cases=["alloc32"], confirm_cases=[])
    assert all(r["ok"] for r in runner.run_gate(ok))
    assert commands[-1][commands[-1].index("--cases") + 1] == "alloc32"
    bad = bench_params.make_params(**common, cases=["alloc500"], confirm_cases=[])
    with pytest.raises(GateRefused) as refused:
        runner.run_gate(bad)
    assert "batches of 500, FAILED at 5,000" in str(refused.value)
    assert "popleft_n(500)" in refused.value.failure


# ------------------------------------------------------------------ counted (valgrind)


def _strip_imports(path: Path) -> str:
    return "".join(
        line
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
        if not line.startswith(("from __future__", "from kvqueue"))
    )


@pytest.mark.slow
def test_regress_counts_alloc500_and_popleft500_on_a_5000_block_pool(tmp_path: Path) -> None:
    """``python -m kvqueue regress`` with ``CASES="alloc500 popleft500" POOLS=5000``: a head
    that wastes a loop only when ``popleft_n`` takes more than 300 blocks regresses both
    cases; ``popleft500`` counts the pops alone (no put-back: fewer instructions per
    operation than ``alloc500``), over the 10 calls a 5,000-block pool holds (a note says
    so)."""
    head = tmp_path / "kv_cache_utils.py"
    text = (
        "from __future__ import annotations\n\n"
        + _strip_imports(SUBJECTS / "stand_in_block.py")
        + "\n\n"
        + _strip_imports(SUBJECTS / "our_queue.py")
    )
    anchor = "            self.num_free_blocks = num - n\n"
    assert text.count(anchor) == 1
    waste = anchor + "            if n > 300:\n                for _ in range(n):  # wasted\n"
    head.write_text(text.replace(anchor, waste + "                    pass\n"), encoding="utf-8")
    out = tmp_path / "regress.md"
    python = str(REPO_ROOT / ".venv" / "bin" / "python")
    options = ["--base", "base=kvqueue", "--head", f"head={head}", "--cases", "alloc500 popleft500"]
    options += ["--pools", "5000", "--gate-ops", "4000", "--out", str(out)]
    proc = subprocess.run(
        [python, "-m", "kvqueue", "regress", *options],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=900,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    assert "batches of 500" in proc.stderr  # the gate ran at N
    rows = {
        m["case"]: m
        for m in re.finditer(
            r"^\| (?P<case>\w+) \| (?P<pool>[\d,]+) \| (?P<base>[\d,.]+) \| (?P<head>[\d,.]+) \|"
            r" (?P<reduction>[+-][\d.]+) % \|[^|]*\| (?P<verdict>[^|]*?) \|$",
            text,
            flags=re.M,
        )
    }
    assert set(rows) == {"alloc500", "popleft500"}
    assert all(r["pool"] == "5,000" and "regressed" in r["verdict"] for r in rows.values())

    def count(case: str, side: str) -> float:
        return float(rows[case][side].replace(",", ""))

    # popleft500 is the pop alone: alloc500 adds append_n of the same 500 blocks.
    assert count("popleft500", "base") < 0.8 * count("alloc500", "base")
    # The wasted loop adds at least its 500 empty iterations per pop to both.
    assert all(count(c, "head") - count(c, "base") > 500 * 50 for c in rows)
    # popleft500 on 5,000 blocks is counted over the 10 calls the pool holds: said so.
    assert "note: popleft500 at 5,000 blocks counts 10 calls" in proc.stderr
