"""``python -m kvqueue bench`` / ``make bench`` end to end: bad input refused with one
line and nothing written, a refused variant, interrupted runs, and a papermill smoke run
of ``notebooks/bench.ipynb`` (the default path) and through ``make``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchutil import (
    GOOD_QUEUE,
    REPO_ROOT,
    TINY_ARGS,
    VARIANTS,
    bench_cli,
    expected_rows,
    fake_python,
    fixed_queue_text,
    only_run_dir,
    read_run_json,
    read_samples,
    rows_per_process,
    run_dirs,
    tree,
)

from kvqueue import __main__ as cli
from kvqueue import schema
from kvqueue.gate import gate
from kvqueue.sources import loader

#: Every test here starts worker, gate or CLI processes.
pytestmark = pytest.mark.slow

# ------------------------------------------------------------------ bad input

#: (id, CLI arguments replacing/adding to a tiny valid run, words expected in the error)
BAD_INPUTS = [
    ("host-missing", ["--host", None], "HOST is missing"),
    ("host-empty", ["--host", ""], "HOST is missing"),
    ("host-slash", ["--host", "a/b"], "not a valid label"),
    ("host-dotdot", ["--host", ".."], "not a valid label"),
    ("host-dotdot-inside", ["--host", "a..b"], "not a valid label"),
    ("host-parent-path", ["--host", "../up"], "not a valid label"),
    ("host-space", ["--host", "my host"], "not a valid label"),
    ("host-leading-space", ["--host", " grace"], "not a valid label"),
    ("case-unknown", ["--cases", "alloc1 alloc0"], "unknown case(s) alloc0"),
    ("cases-empty", ["--cases", ""], "cases is empty"),
    ("processes-zero", ["--processes", "0"], "processes must be a positive"),
    ("processes-negative", ["--processes", "-2"], "processes must be a positive"),
    ("confirm-negative", ["--confirm-processes", "-1"], "confirm_processes must be 0"),
    ("samples-zero", ["--samples", "0"], "samples must be a positive"),
    ("sample-ms-zero", ["--sample-ms", "0"], "sample_ms must be a positive"),
    ("sample-ms-negative", ["--sample-ms", "-5"], "sample_ms must be a positive"),
    ("pool-zero", ["--pools", "0"], "pool sizes must be whole numbers >= 64"),
    ("pool-negative", ["--pools", "64 -128"], "pool sizes must be whole numbers >= 64"),
    ("pool-too-small", ["--pools", "32"], "pool sizes must be whole numbers >= 64"),
    ("pool-not-a-number", ["--pools", "2k"], "pools must be whole numbers"),
    ("pools-empty", ["--pools", ""], "pools is empty"),
    ("cpu-word", ["--cpu", "first"], "cpu must be 'auto' or a CPU number"),
    ("cpu-unavailable", ["--cpu", "4096"], "CPU 4096 is not available"),
    ("python-missing", ["--python", "/nonexistent/bin/python3"], "does not exist"),
    ("python-not-on-path", ["--python", "no-such-python-3.99"], "does not exist"),
    ("python-empty", ["--python", ""], "PYTHON is empty"),
    ("variant-unknown-file", ["--variants", "kvqueue no/such/file.py"], "not a file"),
    ("variant-unknown-scheme", ["--variants", "kvqueue pypi:vllm"], "not a file"),
    ("variant-git-missing", ["--variants", "kvqueue git:/no/such/repo@HEAD"], "does not exist"),
    ("variant-bad-class", ["--variants", "kvqueue kvqueue::not-a-class"], "not a class name"),
    ("variant-class-absent", ["--variants", "kvqueue kvqueue::Nope"], "class Nope not found"),
    ("variant-only-one", ["--variants", "kvqueue"], "at least two variants"),
]


def with_args(base: tuple[str, ...], changes: list[str | None]) -> list[str]:
    """``base`` with each ``--flag value`` pair of ``changes`` replacing (None: dropping)
    the flag's value."""
    args = list(base)
    for flag, value in zip(changes[::2], changes[1::2], strict=True):
        if flag in args:
            i = args.index(flag)
            del args[i : i + 2]
        if value is not None:
            args += [flag, value]
    return args


def assert_refused(proc: subprocess.CompletedProcess, code: int, words: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("make bench: "), lines[0]
    assert words in lines[0], lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("changes", "words"), [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_refused_with_one_line_and_nothing_written(tmp_path, capsys, changes, words):
    """In-process through ``kvqueue.__main__.main`` (the ``bench`` command) to stay fast."""
    raw = tmp_path / "raw"
    args = with_args(("--host", "smoke", "--raw-dir", str(raw), *TINY_ARGS), changes)
    code = cli.main(["bench", *args])
    out, err = capsys.readouterr()
    assert_refused(subprocess.CompletedProcess(args, code, out, err), 2, words)
    assert not raw.exists()
    assert tree(tmp_path) == []


#: A few bad inputs through the real entry point, ``python -m kvqueue bench``.
CLI_BAD_INPUTS = ("host-missing", "host-dotdot", "case-unknown", "samples-zero", "python-missing")


@pytest.mark.parametrize(
    ("changes", "words"),
    [b[1:] for b in BAD_INPUTS if b[0] in CLI_BAD_INPUTS],
    ids=[b[0] for b in BAD_INPUTS if b[0] in CLI_BAD_INPUTS],
)
def test_bad_input_refused_by_the_cli(tmp_path, changes, words):
    raw = tmp_path / "raw"
    args = with_args(("--host", "smoke", "--raw-dir", str(raw), *TINY_ARGS), changes)
    assert_refused(bench_cli(*args), 2, words)
    assert not raw.exists()
    assert tree(tmp_path) == []


def test_python_older_than_3_10_refused(tmp_path):
    old = fake_python(tmp_path / "python3.9", (3, 9, 0))
    raw = tmp_path / "raw"
    proc = bench_cli("--host", "smoke", "--raw-dir", raw, "--python", old, *TINY_ARGS)
    assert_refused(proc, 2, "is CPython 3.9.0; the worker needs Python >= 3.10")
    assert not raw.exists()


@pytest.mark.skipif(
    not Path("/root/.pyenv/versions/3.9.18/bin/python").exists(), reason="no real Python 3.9"
)
def test_real_python_3_9_refused(tmp_path):
    raw = tmp_path / "raw"
    proc = bench_cli(
        "--host",
        "smoke",
        "--raw-dir",
        raw,
        "--python",
        "/root/.pyenv/versions/3.9.18/bin/python",
        *TINY_ARGS,
    )
    assert_refused(proc, 2, "the worker needs Python >= 3.10")
    assert not raw.exists()


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("#!/bin/sh\necho 'not python' >&2\nexit 3\n", "does not run as a Python: not python"),
        ("#!/bin/sh\necho 'hello'\n", "does not run"),
        # pyenv's shim of a version not selected: the first line says it, the last
        # ("Python 2 and 3 to be found at the same time.") was shown before.
        (
            "#!/bin/sh\necho 'pyenv: python2.7: command not found' >&2\necho >&2\n"
            "echo '  Python 2 and 3 to be found at the same time.' >&2\nexit 127\n",
            "does not run as a Python: pyenv: python2.7: command not found",
        ),
    ],
    ids=["fails", "garbage-answer", "pyenv-shim"],
)
def test_python_that_does_not_run_refused(tmp_path, script, words):
    fake = tmp_path / "python"
    fake.write_text(script, encoding="utf-8")
    fake.chmod(0o755)
    raw = tmp_path / "raw"
    proc = bench_cli("--host", "smoke", "--raw-dir", raw, "--python", fake, *TINY_ARGS)
    assert_refused(proc, 2, words)
    assert not raw.exists()


def test_incomplete_queue_class_refused(tmp_path):
    """A class that exists but lacks queue methods: refused before any timing."""
    raw = tmp_path / "raw"
    variants = f"kvqueue {GOOD_QUEUE}::IncompleteQueue"
    args = with_args(
        ("--host", "smoke", "--raw-dir", str(raw), *TINY_ARGS), ["--variants", variants]
    )
    proc = bench_cli(*args, "--no-notebook")
    # The source text resolves (exit 2 would need loading it up front); the gate's
    # loader then refuses it (exit 1). Either way: one line, nothing written.
    assert proc.returncode in (1, 2), proc.stderr
    assert_refused(proc, proc.returncode, "lacks queue method(s): prepend_n, iter_blocks_after")
    assert not raw.exists()


def test_relative_variant_path_from_another_folder(tmp_path):
    (tmp_path / "my_queue.py").write_text(fixed_queue_text(), encoding="utf-8")
    raw = tmp_path / "raw"
    args = with_args(
        ("--host", "rel", "--raw-dir", str(raw), "--no-notebook", *TINY_ARGS),
        ["--variants", "kvqueue my_queue.py"],
    )
    proc = bench_cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert read_run_json(only_run_dir(raw, "rel"))["status"] == "complete"


# ------------------------------------------------------------------ validation gate


def test_broken_fixture_has_exactly_one_bug(tmp_path, broken_queue):
    """The fixture's only bug is in ``remove``: with it fixed, the gate passes."""
    fixed = tmp_path / "fixed_queue.py"
    fixed.write_text(fixed_queue_text(), encoding="utf-8")
    for path, verdict in ((broken_queue, False), (fixed, True)):
        variants = loader.load_variants(["kvqueue", str(path)])
        results = gate.gate(variants, ops=3_000)
        assert [r.ok for r in results] == [True, verdict], results[1].error


@pytest.mark.parametrize("notebook", [False, True], ids=["direct", "notebook"])
def test_gate_refusal_exits_1_and_writes_nothing(tmp_path, notebook, broken_queue):
    raw = tmp_path / "raw"
    args = with_args(
        ("--host", "smoke", "--raw-dir", str(raw), *TINY_ARGS),
        ["--variants", f"kvqueue {broken_queue}"],
    )
    proc = bench_cli(*args, *([] if notebook else ["--no-notebook"]))
    assert proc.returncode == 1, proc.stderr
    # The parameters not at their defaults come first (the gate is part of the run),
    # then the refusal.
    announce, message = proc.stderr[proc.stderr.index("make bench: ") :].split("\n", 1)
    assert announce.startswith("make bench: parameters not at their defaults: HOST=smoke")
    assert message.startswith("make bench: validation gate refused a variant; nothing was timed")
    assert "gate FAIL" in message and "links are not cleared" in message
    assert not raw.exists()
    assert tree(tmp_path) == []


# ------------------------------------------------------------------ interruption

#: Per process about 0.5 s: 2 cases x (warm-up + 3 rounds) x 2 variants x 25 ms.
SLOW_ARGS = (
    "--precision",
    "0",
    "--variants",
    " ".join(VARIANTS),
    "--processes",
    "6",
    "--confirm-processes",
    "2",
    "--samples",
    "3",
    "--sample-ms",
    "25",
    "--pools",
    "64",
    "--cases",
    "alloc1 remove",
)
ROWS_PER_PROCESS = expected_rows(processes=1, cases=2, pools=1, variants=2, samples=3)


def children(pid: int) -> list[int]:
    """Pids of the direct children of ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_and_wait_for_first_process(
    raw: Path, log: Path, notebook: bool = False
) -> tuple[subprocess.Popen, Path]:
    """Start a slow run; return once run.json counts at least one completed process."""
    mode = [] if notebook else ["--no-notebook"]
    cmd = [sys.executable, "-m", "kvqueue", "bench", *mode, "--host", "intr"]
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*cmd, "--raw-dir", str(raw), *SLOW_ARGS],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            # A test suite started in the background by a non-interactive shell (as CI
            # may be) inherits SIGINT *ignored*, and Python then never raises
            # KeyboardInterrupt: give the run the disposition a terminal user has.
            preexec_fn=_default_sigint,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        found = run_dirs(raw, "intr")
        if found and (found[0] / "run.json").exists():
            record = read_run_json(found[0])
            if record["processes_completed"]["main"] >= 1:
                return proc, found[0]
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    pytest.fail("the run did not complete a process in time:\n" + log.read_text())


def check_whole_processes(run_dir: Path, exact: bool = True) -> dict:
    """samples.csv holds only whole processes, and run.json counts exactly those.

    With ``exact=False`` (a hard kill) samples.csv may hold ONE more whole process than
    run.json counts: the runner writes samples.csv first, so a kill between the two
    renames leaves run.json one process behind, never ahead.
    """
    record = read_run_json(run_dir)
    header, rows = read_samples(run_dir)
    assert header == list(schema.SAMPLE_COLUMNS)
    done = record["processes_completed"]
    expected = {("main", i): ROWS_PER_PROCESS for i in range(1, done["main"] + 1)}
    expected |= {("confirm", i): ROWS_PER_PROCESS for i in range(1, done["confirm"] + 1)}
    found = rows_per_process(rows)
    if exact:
        assert found == expected
    else:
        assert set(expected) <= set(found) and len(found) - len(expected) <= 1
        assert set(found.values()) == {ROWS_PER_PROCESS}
    assert [(p["phase"], p["process"]) for p in record["process_info"]] == list(expected)
    assert 1 <= done["main"] + done["confirm"] < 8
    assert record["processes_planned"] == {"main": 6, "confirm": 2}
    return record


@pytest.mark.parametrize("also_worker", [False, True], ids=["runner", "runner+worker"])
def test_sigint_leaves_whole_processes_and_interrupted_status(tmp_path, also_worker):
    """SIGINT to the runner (and, like Ctrl-C in a terminal, to its worker too)."""
    raw = tmp_path / "raw"
    proc, run_dir = start_and_wait_for_first_process(raw, tmp_path / "stderr.txt")
    workers = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    if also_worker:
        for pid in workers:
            os.kill(pid, signal.SIGINT)
    assert proc.wait(timeout=30) == 130, (tmp_path / "stderr.txt").read_text()
    log = (tmp_path / "stderr.txt").read_text()
    assert "interrupted:" in log and "marked incomplete" in log
    record = check_whole_processes(run_dir)
    assert record["status"] == "interrupted"
    assert record["ended_at"] is not None
    assert tree(run_dir) == ["run.json", "samples.csv"]  # no temp files left
    # The worker that was running was stopped, not left behind.
    time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)]


def test_sigkill_leaves_whole_processes_and_running_status(tmp_path):
    raw = tmp_path / "raw"
    proc, run_dir = start_and_wait_for_first_process(raw, tmp_path / "stderr.txt")
    try:
        workers = children(proc.pid)
        assert workers, "no worker was running"
    finally:
        # Killed whatever the assertion says: a runner left alive held the machine lock
        # and refused the next 11 tests' benches (CI under load, 2026-12-04).
        proc.kill()
        proc.wait(timeout=30)
    # The parent-death signal ends the worker with its runner: no orphan keeps timing.
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in workers if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a worker outlived its killed runner"
    record = check_whole_processes(run_dir, exact=False)
    assert record["status"] == "running"  # never marked complete
    assert record["ended_at"] is None


def test_sigint_on_the_notebook_path_interrupts_the_run(tmp_path):
    """The default path: SIGINT reaches the runner inside the notebook's kernel."""
    raw = tmp_path / "raw"
    log = tmp_path / "stderr.txt"
    proc, run_dir = start_and_wait_for_first_process(raw, log, notebook=True)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, log.read_text()
    record = check_whole_processes(run_dir)
    assert record["status"] == "interrupted"
    # The executed notebook is filed with the partial run, showing the interruption.
    assert tree(run_dir) == ["bench.ipynb", "run.json", "samples.csv"]
    nb = json.loads((run_dir / "bench.ipynb").read_text(encoding="utf-8"))
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert [e["ename"] for e in errors] == ["KeyboardInterrupt"]


# ------------------------------------------------------------------ papermill smoke runs


def check_notebook_record(run_dir: Path, host: str, raw: Path) -> dict:
    nb = json.loads((run_dir / "bench.ipynb").read_text(encoding="utf-8"))
    cells = nb["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1
    source = "".join(injected[0]["source"])
    assert f'host = "{host}"' in source
    assert f'raw_dir = "{raw}"' in source
    assert f'run_id = "{run_dir.name}"' in source
    assert "quick = True" in source
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code)
    assert sum(bool(c["outputs"]) for c in code) >= 2
    assert not [o for c in code for o in c["outputs"] if o.get("output_type") == "error"]
    assert nb["metadata"]["papermill"]["parameters"]["host"] == host
    return nb


def test_quick_run_through_the_bench_notebook(tmp_path):
    raw = tmp_path / "raw"
    proc = bench_cli(
        "--host",
        "smoke",
        "--quick",
        "--raw-dir",
        raw,
        "--variants",
        " ".join(VARIANTS),
        "--pools",
        "64",
        "--cases",
        "alloc1 remove",
    )
    assert proc.returncode == 0, proc.stderr
    # A quiet kernel: no transport warning, no stray KeyboardInterrupt log line.
    assert "without encryption" not in proc.stderr, proc.stderr
    assert "KeyboardInterrupt" not in proc.stderr, proc.stderr
    run_dir = only_run_dir(raw, "smoke")
    assert tree(run_dir) == ["bench.ipynb", "run.json", "samples.csv"]
    nb = check_notebook_record(run_dir, "smoke", raw)
    # Sealed: run.json holds the digests of both files as they are on disk.
    files = read_run_json(run_dir)["files"]
    for name in ("samples.csv", "bench.ipynb"):
        assert files[name]["sha256"] == hashlib.sha256((run_dir / name).read_bytes()).hexdigest()
    # The summary table of the last cell names both variants.
    last = "".join(
        "".join(o.get("data", {}).get("text/plain", "")) for o in nb["cells"][-1]["outputs"]
    )
    assert "kvqueue:floor" in last
    record = read_run_json(run_dir)
    assert record["status"] == "complete"
    assert record["parameters"]["quick"] is True
    # QUICK defaults: 2 + 1 processes, 3 samples, 5 ms.
    assert record["processes_completed"] == {"main": 2, "confirm": 1}
    assert record["parameters"]["samples"] == 3
    assert record["parameters"]["sample_ms"] == 5.0
    _, rows = read_samples(run_dir)
    assert len(rows) == expected_rows(processes=3, cases=2, pools=1, variants=2, samples=3)


def make_ready() -> bool:
    """``make`` exists and ``make bench`` would not reinstall the venv (no network)."""
    if shutil.which("make") is None or not (REPO_ROOT / ".venv").is_dir():
        return False
    proc = subprocess.run(
        ["make", "-q", ".venv/.installed"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    return proc.returncode == 0


needs_make = pytest.mark.skipif(not make_ready(), reason="no make, or `make setup` not done")


@needs_make
def test_make_bench_quick(tmp_path):
    raw = tmp_path / "raw"
    proc = subprocess.run(
        [
            "make",
            "bench",
            "HOST=smoke",
            "QUICK=1",
            f"RAW_DIR={raw}",
            "VARIANTS=kvqueue kvqueue:floor",
            "POOLS=64",
            "CASES=alloc1 remove",
            "SAMPLES=2",
            "SAMPLE_MS=2",
            "SEED=7",
            "AA=1",
            "CPU=auto",
            f"PYTHON={sys.executable}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(raw, "smoke")
    check_notebook_record(run_dir, "smoke", raw)
    record = read_run_json(run_dir)
    assert record["status"] == "complete"
    params = record["parameters"]
    assert params["variants"] == ["kvqueue", "kvqueue:floor"]
    assert (params["samples"], params["sample_ms"], params["seed"]) == (2, 2.0, 7)
    assert params["aa"] is True and params["quick"] is True
    assert [v["label"] for v in record["variants"]] == ["kvqueue", "kvqueue:floor", "kvqueue#2"]
    _, rows = read_samples(run_dir)
    assert len(rows) == expected_rows(processes=3, cases=2, pools=1, variants=3, samples=2)


@needs_make
@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ([], "HOST is missing"),
        (["HOST=a/b"], "not a valid label"),
        (["HOST=x", "CASES=nope"], "nope"),
    ],
    ids=["no-host", "host-slash", "unknown-case"],
)
def test_make_bench_refuses_bad_input(tmp_path, variables, words):
    raw = tmp_path / "raw"
    proc = subprocess.run(
        ["make", "bench", f"RAW_DIR={raw}", *variables],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    # make's own "*** Error" line says make: or, under an outer make (make test), make[N]:
    ours = [line for line in proc.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", line)]
    assert len(ours) == 1 and ours[0].startswith("make bench: ") and words in ours[0], proc.stderr
    assert not raw.exists()


def test_run_ids_are_distinct_and_well_formed():
    ids = {schema.new_run_id("cpython-312") for _ in range(50)}
    assert len(ids) > 1
    assert all(re.fullmatch(r"\d{8}T\d{6}Z-cp312-[0-9a-f]{4}", i) for i in ids)
