"""Instruction counts (``METRIC=instructions``, ``make check-queue``): the arithmetic,
the run folder, the one-line refusals, and — under valgrind — determinism and a
regression check that fails on a deliberately slowed copy of our queue."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvqueue import schema
from kvqueue.ab import queue_check, where_tables
from kvqueue.errors import BenchInputError
from kvqueue.measure import cachegrind, counts_run
from kvqueue.params import bench_params
from kvqueue.stats import count_figures

REPO = Path(__file__).resolve().parent.parent
needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="valgrind not installed (.ci/run installs it)"
)


def _row(run: str, label: str = "a", loops: int = 0, ir: int = 0, **events: int) -> dict:
    row = {"case": "alloc1", "pool": 2048, "label": label, "run": run, "loops": loops}
    row["per_loop"] = 1
    return {**row, **{e: events.get(e, "") for e in schema.COUNT_EVENTS}, "Ir": ir}


def test_cachegrind_summary_is_parsed() -> None:
    text = "desc: x\ncmd: python\nevents: Ir I1mr ILmr\nfl=a\n1 2 3\nsummary: 1234 5 6\n"
    assert cachegrind.parse_cachegrind(text) == {"Ir": 1234, "I1mr": 5, "ILmr": 6}


def test_a_crashed_process_without_summary_is_one_error() -> None:
    with pytest.raises(cachegrind.BenchError, match="no summary"):
        cachegrind.parse_cachegrind("events: Ir\n")


def test_instructions_per_op_is_the_difference_over_the_loops() -> None:
    rows = [
        _row("zero", ir=1_000_000),
        _row("zero2", ir=1_000_040),
        _row("target", "a", loops=20_000, ir=1_000_000 + 20_000 * 3_300),
    ]
    (c,) = count_figures.per_op(rows)
    assert c.instructions == 3_300
    assert c.spread == pytest.approx(40 / 20_000)
    assert c.est_cycles is None


def test_estimated_cycles_weigh_l1_ll_and_ram() -> None:
    zero = {"Dr": 0, "Dw": 0, "I1mr": 0, "D1mr": 0, "D1mw": 0, "ILmr": 0, "DLmr": 0, "DLmw": 0}
    # 100 refs (Ir 60 + Dr 30 + Dw 10), 10 L1 misses of which 2 miss LL too.
    t = {"Dr": 30, "Dw": 10, "I1mr": 4, "D1mr": 4, "D1mw": 2, "ILmr": 1, "DLmr": 1, "DLmw": 0}
    rows = [_row("zero", ir=0, **zero), _row("target", "a", loops=1, ir=60, **t)]
    (c,) = count_figures.per_op(rows)
    assert c.l1_misses == 10 and c.ll_misses == 2
    assert c.est_cycles == 90 * 1 + 8 * 5 + 2 * 35


def test_a_target_without_its_zero_run_is_refused() -> None:
    with pytest.raises(ValueError, match="no zero run"):
        count_figures.per_op([_row("target", "a", loops=10, ir=5)])


def test_a_zero_run_of_every_case_serves_each_case_of_its_variant() -> None:
    rows = [
        _row("zero", "a", ir=100),
        _row("target", "a", loops=10, ir=100 + 10 * 7),
    ]
    rows[0]["case"] = cachegrind.ALL_CASES
    (c,) = count_figures.per_op(rows)
    assert c.instructions == 7 and c.case == "alloc1"


def test_the_plan_counts_every_label_once_per_cell_and_the_zero_run_twice_once() -> None:
    jobs = cachegrind.plan(["a", "b"], ["alloc1", "mix"], [2048, 100_000])
    assert [j.run for j in jobs].count("zero2") == 1
    # One zero run per variant and pool, every case warmed in it.
    assert [j.run for j in jobs].count("zero") == 4
    assert {j.case for j in jobs if j.run == "zero"} == {cachegrind.ALL_CASES}
    targets = [(j.label, j.case, j.pool) for j in jobs if j.run == "target"]
    assert len(targets) == len(set(targets)) == 8
    mix = next(j for j in jobs if j.case == "mix" and j.run == "target" and j.label == "b")
    assert mix.loops * 100 >= cachegrind.TARGET_OPS  # 100 operations per mix loop
    spec = cachegrind.job_spec(
        {
            "sources": ["x", "y"],
            "labels": ["a", "b"],
            "block_source": None,
            "block_mode": "shared",
            "expected_sha256": {"a": "1", "b": "2"},
            "cases": ["alloc1", "mix"],
        },
        mix,
    )
    # The variant alone, on the baseline's block class, with the gate's digest.
    assert spec["sources"] == ["y"] and spec["labels"] == ["b"]
    assert spec["block_source"] == "x" and spec["expected_sha256"] == {"b": "2"}
    assert spec["target"] == ["b", "mix", 2048, mix.loops]


def test_metric_and_cache_simulation_are_checked_in_one_line() -> None:
    with pytest.raises(BenchInputError, match=r"metric must be one of time \| instructions"):
        bench_params.make_params(host="h", metric="cycles")
    with pytest.raises(BenchInputError, match="cache_sim needs metric instructions"):
        bench_params.make_params(host="h", cache_sim=True)
    assert bench_params.make_params(host="h", metric="instructions", cache_sim=True).cache_sim


def test_a_missing_valgrind_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cachegrind.shutil, "which", lambda name: None)
    with pytest.raises(BenchInputError, match="apt-get install valgrind"):
        cachegrind.find_valgrind()


def test_a_reference_of_another_format_is_refused(tmp_path: Path) -> None:
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"format": 99, "entries": {}}))
    with pytest.raises(BenchInputError, match="not a format-2 reference"):
        queue_check.load_reference(ref)


def test_a_check_that_compared_nothing_fails() -> None:
    skipped = queue_check.Outcome("python3", "k", "skipped", ("no reference",))
    assert queue_check.exit_status([skipped]) == 1
    ok = queue_check.Outcome("python3", "k", "ok", ())
    assert queue_check.exit_status([skipped, ok]) == 0


def test_counts_csv_round_trips_through_the_reader(tmp_path: Path) -> None:
    rows = [
        _row("zero", "a", ir=10),
        _row("target", "a", loops=2, ir=30),
        _row("zero", "b", ir=10),
        _row("target", "b", loops=2, ir=20),
    ]
    run = tmp_path / "h" / "r"
    run.mkdir(parents=True)
    text = counts_run.counts_text(rows)
    (run / schema.COUNTS_CSV).write_text(text)
    import hashlib

    meta = {
        "status": "complete",
        schema.FILES_KEY: {
            schema.COUNTS_CSV: {"sha256": hashlib.sha256(text.encode()).hexdigest()}
        },
    }
    got = count_figures.read_count_run(run, meta)
    assert not isinstance(got, str)
    assert [c.instructions for c in count_figures.per_op(got.rows)] == [10.0, 5.0]
    (run / schema.COUNTS_CSV).write_text(text.replace(",30,", ",31,"))
    assert "edited after the run" in count_figures.read_count_run(run, meta)


# ------------------------------------------------------------------ under valgrind


def _our_queue(tmp_path: Path, slowed: bool = False) -> str:
    """Our queue and block class in one file (a FILE source, ``…::FreeKVCacheBlockQueue``),
    with ``slowed`` a few wasted bytecodes at the top of ``popleft_n``."""
    block = (REPO / "kvqueue" / "subjects" / "stand_in_block.py").read_text()
    ours = (REPO / "kvqueue" / "subjects" / "our_queue.py").read_text()
    ours = ours.replace("from kvqueue.subjects.stand_in_block import KVCacheBlock\n", "")
    anchor = (
        '        """Pop the first ``n`` free blocks and reduce ``num_free_blocks`` by ``n``."""\n'
    )
    assert ours.count(anchor) >= 1
    if slowed:
        ours = ours.replace(anchor, anchor + "        for _ in range(3):\n            pass\n", 1)
    path = tmp_path / "our_copy.py"
    path.write_text(block + "\n\n" + ours.split("from __future__ import annotations\n", 1)[1])
    return f"{path}::FreeKVCacheBlockQueue"


@pytest.mark.slow
@needs_valgrind
def test_the_check_fails_on_a_slowed_copy_of_our_queue(tmp_path: Path) -> None:
    """The reference is recorded for a copy of our queue, which is then slowed in place:
    the same source, another sha256 (a reference of another source is refused)."""
    ref = tmp_path / "ref.json"
    out = tmp_path / "out.txt"
    queue = _our_queue(tmp_path)
    with out.open("w") as stream:
        rec = queue_check.check(
            [sys.executable], reference=ref, update=True, cases=("alloc1",), queue=queue, out=stream
        )
        assert [o.status for o in rec] == ["recorded"]
        same = queue_check.check(
            [sys.executable], reference=ref, cases=("alloc1",), queue=queue, out=stream
        )
        _our_queue(tmp_path, slowed=True)
        slow = queue_check.check(
            [sys.executable], reference=ref, cases=("alloc1",), queue=queue, out=stream
        )
    assert queue_check.exit_status(same) == 0, out.read_text()
    assert queue_check.exit_status(slow) == 1, out.read_text()
    assert "MORE INSTRUCTIONS (reduction below -1 %)" in out.read_text()
    assert "the queue's code changed since the reference" in out.read_text()


@pytest.mark.slow
@needs_valgrind
def test_two_counts_agree_to_a_hundredth_of_a_percent() -> None:
    spec = {
        "sources": ["kvqueue", "vllm==0.32.0"][:1],
        "labels": ["kvqueue"],
        "block_source": None,
        "block_mode": "shared",
        "expected_sha256": {},
        "cases": ["alloc2"],
        "pools": [2048],
        "seed": 1,
        "case_seed": 1,
    }
    valgrind = cachegrind.find_valgrind()
    with open("/dev/null", "w") as quiet:
        a = count_figures.per_op(
            cachegrind.count(sys.executable, spec, valgrind=valgrind, progress=quiet)
        )
        b = count_figures.per_op(
            cachegrind.count(sys.executable, spec, valgrind=valgrind, progress=quiet)
        )
    assert abs(a[0].instructions / b[0].instructions - 1) < 1e-4


_PER_OP = """
import io, json, sys
from kvqueue.measure import cachegrind
from kvqueue.stats import count_figures
spec = json.loads(sys.argv[1])
rows = cachegrind.count(sys.executable, spec, valgrind=cachegrind.find_valgrind(),
                        progress=io.StringIO())
print(json.dumps({c.case: c.instructions for c in count_figures.per_op(rows)}))
"""


@pytest.mark.slow
@needs_valgrind
def test_counts_do_not_depend_on_where_the_project_is_checked_out(tmp_path: Path) -> None:
    # The project's package copied under folder names of four lengths, counted from each
    # (the runner's folder as well). With the checkout's own path on the counted
    # process's PYTHONPATH, 18 more characters moved CPython 3.11.7's alloc2 by -1.5 %.
    spec = {
        "sources": ["kvqueue"], "labels": ["kvqueue"], "block_source": None,
        "block_mode": "shared", "expected_sha256": {}, "cases": ["alloc2", "remove"],
        "pools": [2048], "seed": 1, "case_seed": 1,
    }  # fmt: skip
    got = []
    for name in ("a", "b" * 7, "c" * 23, "d" * 61):
        home = tmp_path / name
        shutil.copytree(
            REPO / "kvqueue", home / "kvqueue", ignore=shutil.ignore_patterns("__pycache__")
        )
        out = subprocess.run(
            [sys.executable, "-c", _PER_OP, json.dumps(spec)],
            cwd=home, env={**os.environ, "PYTHONPATH": str(home)},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        got.append(json.loads(out.stdout))
    for case in spec["cases"]:
        values = [g[case] for g in got]
        assert max(values) / min(values) - 1 < 0.002, (case, values)


def test_a_counted_process_imports_through_paths_of_one_length(tmp_path: Path) -> None:
    # What keeps the counts above apart from the checkout: nothing the counted process
    # imports or reads names the project's own folder, only the fixed-length root.
    root = cachegrind._fixed_root(tmp_path)
    probe = (
        "import sys, kvqueue.sources.loader as l, kvqueue.sources.cache_paths as c\n"
        "print(sys.path[0]); print(l.__file__); print(l._OWN_FILE); print(c.cache_dir())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, env=cachegrind._env(root),
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    project = str(REPO)
    assert all(not line.startswith(project) for line in out), out
    assert out[1].startswith(str(root)) and out[2].startswith(str(root)), out
    assert out[3] == str(root / "cache" / "kvqueue")


@pytest.mark.slow
@needs_valgrind
def test_a_source_given_by_a_relative_path_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The counted process starts in a folder of its own; the path is the runner's.
    queue = _our_queue(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = queue.replace(f"{tmp_path}/", "")
    assert not relative.startswith("/")
    spec = {
        "sources": [relative], "labels": ["mine"], "block_source": None,
        "block_mode": "shared", "expected_sha256": {}, "cases": ["alloc1"],
        "pools": [64], "seed": 1, "case_seed": 1,
    }  # fmt: skip
    with open(os.devnull, "w") as quiet:
        rows = cachegrind.count(
            sys.executable, spec, valgrind=cachegrind.find_valgrind(), progress=quiet
        )
    assert count_figures.per_op(rows)[0].instructions > 0


@pytest.mark.slow
@needs_valgrind
def test_a_counts_run_is_a_sealed_run_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("KVQUEUE_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvqueue",
            "bench",
            "--host",
            "probe",
            "--metric",
            "instructions",
            "--variants",
            "kvqueue kvqueue:floor",
            "--cases",
            "alloc1",
            "--pools",
            "2048",
            "--gate-ops",
            "2000",
            "--raw-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "KVQUEUE_LOCK_FILE": str(tmp_path / "lock")},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "probe").iterdir()
    assert "-counts-" in run.name
    meta = json.loads((run / schema.RUN_JSON).read_text())
    assert meta[schema.KIND_KEY] == schema.KIND_COUNTS and meta["status"] == "complete"
    assert meta[schema.COUNTING_KEY]["valgrind"].startswith("valgrind-")
    got = count_figures.read_count_run(run, meta)
    assert not isinstance(got, str)
    labels = {c.label for c in count_figures.per_op(got.rows)}
    assert labels == {"kvqueue", "kvqueue:floor"}
    # Where the instructions went (issue 36): where.csv written once and sealed, numbers
    # and names only, and the writeup's section built from it with the texts read here.
    assert meta[schema.COUNTING_KEY][schema.WHERE_FORMAT_KEY] == schema.WHERE_FORMAT
    assert meta[schema.FILES_KEY][schema.WHERE_CSV]["rows"] == len(got.where) > 0
    kinds = {(r["label"], r["kind"]) for r in got.where}
    assert kinds == {(v, k) for v in labels for k in ("c", "part", "line")}
    parts = [r for r in got.where if r["kind"] == schema.WHERE_PART]
    assert {r["part"] for r in parts} == {"queue"} and all(len(r["detail"]) == 64 for r in parts)
    assert "def " not in (run / schema.WHERE_CSV).read_text()
    where = count_figures.where_frame([got], [meta["run_id"]])
    pairs = count_figures.pair_reductions(
        count_figures.counts_frame([got]), [("kvqueue:floor", "kvqueue")]
    )
    note = where_tables.writeup_note(where, pairs, "kvqueue:floor", "kvqueue")
    assert "```diff" in note and "| C function |" in note and "bytecodes/op" in note
