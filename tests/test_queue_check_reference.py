"""``make check-queue`` (issue 28.2): a reference knows what it was recorded for, every
input is checked before valgrind starts, ``UPDATE=1`` prints old -> new, a failed count
is one line, and the counted worker never counts a garbage collection.

Fast: the counting function is faked (``queue_check.count_queue``) and so is valgrind's
probe; interpreters are either the running one or small scripts that answer the probe
like a given Python would.
"""

from __future__ import annotations

import gc
import json
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kvqueue import __main__ as cli
from kvqueue.ab import queue_check
from kvqueue.errors import BenchError, BenchInputError
from kvqueue.measure import cachegrind, counted_worker, interpreter_checks

REPO = Path(__file__).resolve().parent.parent
FAKE_VALGRIND = cachegrind.Valgrind(path="/fake/valgrind", version="valgrind-fake", cache_sim=False)


class FakeCounter:
    """Stands in for :func:`queue_check.count_queue`: per interpreter, the counts to
    return (or a BenchError to raise); records every call."""

    def __init__(self, counts: dict[str, Any] | None = None, default: Any = None) -> None:
        self.counts = counts or {}
        self.default = default if default is not None else {"alloc1": 100.0, "alloc2": 200.0}
        self.calls: list[str] = []

    def __call__(self, python: str, _queue: str, cases: Sequence[str], *_rest: Any) -> Any:
        self.calls.append(python)
        got = self.counts.get(python, self.default)
        if isinstance(got, Exception):
            raise got
        return {c: v for c, v in got.items() if c in cases}


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> FakeCounter:
    fake = FakeCounter()
    monkeypatch.setattr(queue_check, "count_queue", fake)
    monkeypatch.setattr(queue_check.cachegrind, "find_valgrind", lambda **_kw: FAKE_VALGRIND)
    return fake


def _fake_python(tmp_path: Path, name: str, version: str, impl: str = "CPython") -> str:
    """A script that answers the probe as ``impl`` ``version`` would (nothing else)."""
    parts = [int(x) for x in version.split(".")]
    answer = {
        "sys_version": f"{version} (fake build {name})",
        "machine": "x86_64",
        "version": version,
        "implementation": impl,
        "version_info": parts,
        "flags": {"optimize": 0},
        "executable": str(tmp_path / name),
    }
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _our_queue_file(tmp_path: Path, slowed: bool = False) -> str:
    """Our queue and block class in one file (a FILE source); ``slowed`` adds three
    wasted loop iterations at the top of ``popleft_n`` (a change of the class's text,
    hence of its sha256)."""
    block = (REPO / "kvqueue" / "subjects" / "stand_in_block.py").read_text()
    ours = (REPO / "kvqueue" / "subjects" / "our_queue.py").read_text()
    ours = ours.replace("from kvqueue.subjects.stand_in_block import KVCacheBlock\n", "")
    if slowed:
        anchor = (
            '        """Pop the first ``n`` free blocks and reduce ``num_free_blocks`` by '
            '``n``."""\n'
        )
        assert anchor in ours
        ours = ours.replace(anchor, anchor + "        for _ in range(3):\n            pass\n", 1)
    body = ours.split("from __future__ import annotations\n", 1)[1]
    path = tmp_path / "copy_queue.py"
    path.write_text(block + "\n\n" + body)
    return f"{path}::FreeKVCacheBlockQueue"


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(["check-queue", *args])
    got = capsys.readouterr()
    return status, got.out, got.err


def _record(ref: Path, pythons: str, queue: str = "kvqueue") -> None:
    assert cli.main(["check-queue", "--update", "--pythons", pythons, "--queue", queue,
                     "--reference", str(ref)]) == 0  # fmt: skip


# ------------------------------------------------------------------ what it was recorded for


def test_a_reference_of_another_queue_is_refused_in_one_line(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's probe: UPDATE=1 for another queue, then a check of ours (was "ok")."""
    ref = tmp_path / "r.json"
    other = _our_queue_file(tmp_path)
    _record(ref, sys.executable, queue=other)
    capsys.readouterr()
    counter.calls.clear()
    status, out, err = _run(["--pythons", sys.executable, "--reference", str(ref)], capsys)
    assert status == 2, out + err
    assert counter.calls == [] and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("make check-queue: ")
    assert f"recorded for queue '{other}'" in line and "not 'kvqueue'" in line
    # The same source is compared (the refusal is of the source, not of the digest).
    status, out, err = _run(
        ["--pythons", sys.executable, "--reference", str(ref), "--queue", other], capsys
    )
    assert status == 0, out + err
    assert "sha256" in out and "as recorded" in out


def test_a_changed_queue_is_compared_and_its_digest_shown(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = tmp_path / "r.json"
    queue = _our_queue_file(tmp_path)
    _record(ref, sys.executable, queue=queue)
    recorded = json.loads(ref.read_text())["entries"]
    (entry,) = recorded.values()
    assert entry["queue"]["source"] == queue and len(entry["queue"]["class_sha256"]) == 64
    assert entry["plan"] == queue_check.plan_of(queue_check.CASES)
    capsys.readouterr()
    # Our queue's code changes (the class text, so its digest): that is what is checked.
    _our_queue_file(tmp_path, slowed=True)
    status, out, err = _run(
        ["--pythons", sys.executable, "--reference", str(ref), "--queue", queue], capsys
    )
    assert status == 0, out + err
    assert "the queue's code changed since the reference" in out
    assert entry["queue"]["class_sha256"][:12] in out


def test_a_reference_of_another_plan_is_refused(tmp_path: Path, counter: FakeCounter) -> None:
    ref = tmp_path / "r.json"
    queue_check.check([sys.executable], reference=ref, update=True, cases=("alloc1",))
    counter.calls.clear()
    with pytest.raises(BenchInputError, match=r"another plan \(cases \['alloc1'\] -> "):
        queue_check.check([sys.executable], reference=ref, cases=("alloc1", "alloc2"))
    assert counter.calls == []


def test_a_reference_counted_with_the_checkouts_own_paths_is_re_recorded(
    tmp_path: Path, counter: FakeCounter
) -> None:
    # Entries recorded before the counted process's paths had one length (no "layout"
    # in their plan) differ by up to 1.5 %, and those of an older layout (2 compiled the
    # standard library) by up to 1.4 %: refused by name, and UPDATE=1 replaces them.
    ref = tmp_path / "r.json"
    queue_check.check([sys.executable], reference=ref, update=True)
    data = json.loads(ref.read_text())
    for old, shown in ((None, "None"), (cachegrind.LAYOUT - 1, str(cachegrind.LAYOUT - 1))):
        for entry in data["entries"].values():
            entry["plan"]["layout"] = old
            if old is None:
                entry["plan"].pop("layout")
        ref.write_text(json.dumps(data))
        words = rf"another plan \(layout {shown} -> {cachegrind.LAYOUT}\)"
        with pytest.raises(BenchInputError, match=words):
            queue_check.check([sys.executable], reference=ref)
    assert [o.status for o in queue_check.check([sys.executable], reference=ref, update=True)] == [
        "recorded"
    ]
    assert [o.status for o in queue_check.check([sys.executable], reference=ref)] == ["ok"]


def test_update_prints_old_to_new_per_case(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = tmp_path / "r.json"
    counter.default = {"alloc1": 100.0}
    queue_check.check([sys.executable], reference=ref, update=True, cases=("alloc1",))
    first = capsys.readouterr().out
    assert "alloc1: new 100.0 instructions/op" in first
    counter.default = {"alloc1": 101.0, "alloc2": 50.0}
    queue_check.check([sys.executable], reference=ref, update=True, cases=("alloc1", "alloc2"))
    again = capsys.readouterr().out
    assert "alloc1: 100.0 -> 101.0 instructions/op (reduction -1.00 %)" in again
    assert "alloc2: new 50.0 instructions/op" in again
    assert "plan: cases ['alloc1'] -> ['alloc1', 'alloc2']" in again
    entry = next(iter(json.loads(ref.read_text())["entries"].values()))
    assert entry["instructions_per_op"] == {"alloc1": 101.0, "alloc2": 50.0}


def test_update_names_a_change_of_queue(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = tmp_path / "r.json"
    _record(ref, sys.executable)
    other = _our_queue_file(tmp_path)
    capsys.readouterr()
    _record(ref, sys.executable, queue=other)
    out = capsys.readouterr().out
    assert "queue: kvqueue (sha256 " in out and f"-> {other} (sha256 " in out


# ------------------------------------------------------------------ inputs, before valgrind


def test_a_missing_reference_is_refused_not_no_reference(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = tmp_path / "nothing.json"
    status, out, err = _run(["--pythons", sys.executable, "--reference", str(ref)], capsys)
    assert status == 2 and out == "" and counter.calls == []
    (line,) = err.strip().splitlines()
    assert f"REFERENCE '{ref}' does not exist" in line and "UPDATE=1" in line
    assert not ref.exists()


def test_update_creates_a_missing_reference(tmp_path: Path, counter: FakeCounter) -> None:
    ref = tmp_path / "new" / "r.json"
    _record(ref, sys.executable)
    data = json.loads(ref.read_text())
    assert data["format"] == queue_check.REFERENCE_FORMAT == 2


@pytest.mark.parametrize(
    "problem",
    [
        "queue",
        "missing python",
        "folder python",
        "python 2.7",
        "python 3.9",
        "pypy",
        "not a python",
        "not json",
        "format 1",
        "bad entry",
        "same build twice",
        "no valgrind",
    ],
)
@pytest.mark.parametrize("update", [False, True])
def test_every_input_is_refused_in_one_line_before_anything_is_counted(
    problem: str,
    update: bool,
    tmp_path: Path,
    counter: FakeCounter,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ref = tmp_path / "r.json"
    _record(ref, sys.executable)
    before = ref.read_text()
    capsys.readouterr()
    counter.calls.clear()
    pythons, queue, expect = sys.executable, "kvqueue", ""
    if problem == "queue":
        queue, expect = "no/such/file.py", "QUEUE 'no/such/file.py': "
    elif problem == "missing python":
        pythons, expect = f"{sys.executable} /no/such/python3", "'/no/such/python3' does not exist"
    elif problem == "folder python":  # said "does not exist" (issue 36.6)
        pythons, expect = (
            f"{sys.executable} {tmp_path}",
            f"'{tmp_path}' is a folder, not an interpreter",
        )
    elif problem == "python 2.7":
        old = _fake_python(tmp_path, "py27", "2.7.18")
        pythons, expect = f"{sys.executable} {old}", "is CPython 2.7.18; the counted worker needs"
    elif problem == "python 3.9":
        old = _fake_python(tmp_path, "py39", "3.9.18")
        pythons, expect = old, "is CPython 3.9.18; the counted worker needs CPython >= 3.10"
    elif problem == "pypy":
        pythons, expect = _fake_python(tmp_path, "pypy", "3.10.14", "PyPy"), "is PyPy 3.10.14"
    elif problem == "not a python":
        script = tmp_path / "nopython"
        script.write_text("#!/bin/sh\necho hello\n")
        script.chmod(0o755)
        pythons, expect = str(script), "does not run as a Python"
    elif problem == "not json":
        ref.write_text("{not json")
        before, expect = ref.read_text(), "is not a readable JSON file"
    elif problem == "format 1":
        data = json.loads(before)
        data["format"] = 1
        ref.write_text(json.dumps(data))
        before, expect = ref.read_text(), "format-1 reference"
        if update:
            pytest.skip("UPDATE=1 re-records a format-1 file (its own test)")
    elif problem == "bad entry":
        data = json.loads(before)
        next(iter(data["entries"].values())).pop("plan")
        ref.write_text(json.dumps(data))
        before, expect = ref.read_text(), "is not a format-2 entry"
    elif problem == "same build twice":
        pythons, expect = f"{sys.executable} {sys.executable}", "names one build twice"
    elif problem == "no valgrind":

        def missing(**_kw: Any) -> cachegrind.Valgrind:
            raise BenchInputError(cachegrind.INSTALL_HINT)

        monkeypatch.setattr(queue_check.cachegrind, "find_valgrind", missing)
        expect = "apt-get install valgrind"
    args = ["--pythons", pythons, "--queue", queue, "--reference", str(ref)]
    status, out, err = _run([*args, "--update"] if update else args, capsys)
    assert status == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith("make check-queue: ") and expect in line, line
    assert counter.calls == [] and out == ""
    assert ref.read_text() == before  # nothing written


def test_a_bare_name_that_is_a_folder_here_is_named_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PYTHONS=venv`` beside a folder venv: not on PATH, but what was meant is clear."""
    (tmp_path / "venv").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BenchInputError) as info:
        interpreter_checks.check_python("venv", "PYTHONS")
    assert str(info.value) == "PYTHONS 'venv' is a folder, not an interpreter"


def test_a_format_1_reference_is_refused_and_re_recorded(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    key = queue_check.probe_interpreter(sys.executable).key
    old = {
        "format": 1,
        "threshold_pct": 1.0,
        "entries": {
            key: {"python": "x", "queue": "kvqueue", "instructions_per_op": {"alloc1": 80.0}},
            "another build [x86_64]": {"queue": "kvqueue", "instructions_per_op": {}},
        },
    }
    ref = tmp_path / "r.json"
    ref.write_text(json.dumps(old))
    status, out, err = _run(["--pythons", sys.executable, "--reference", str(ref)], capsys)
    assert status == 2 and counter.calls == []
    (line,) = err.strip().splitlines()
    assert "format-1 reference" in line and "re-record it with `make check-queue UPDATE=1" in line
    status, out, err = _run(
        ["--pythons", sys.executable, "--reference", str(ref), "--update"], capsys
    )
    assert status == 0, out + err
    assert "replaces a format-1 entry" in out and "alloc1: 80.0 -> 100.0" in out
    assert "dropped 1 format-1 entry not re-recorded: another build [x86_64]" in out
    data = json.loads(ref.read_text())
    assert data["format"] == 2 and list(data["entries"]) == [key]


def test_the_committed_reference_records_our_queue_and_the_plan() -> None:
    path = REPO / "data" / "reference" / "queue-instructions.json"
    data, legacy = queue_check.load_reference(path)
    assert legacy == {} and data["format"] == queue_check.REFERENCE_FORMAT
    assert len(data["entries"]) >= 4
    for entry in data["entries"].values():
        assert entry["queue"]["source"] == "kvqueue"
        assert entry["plan"] == queue_check.plan_of(queue_check.CASES)
        assert sorted(entry["instructions_per_op"]) == sorted(queue_check.CASES)


# ------------------------------------------------------------------ during counting


def test_a_failed_count_is_one_line_and_the_others_still_print_and_record(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _fake_python(tmp_path, "py312", "3.12.1")
    second = _fake_python(tmp_path, "py313", "3.13.0")
    ref = tmp_path / "r.json"
    _record(ref, f"{first} {second}")
    capsys.readouterr()
    counter.counts[first] = BenchError("counted process (target x alloc1/2048) exited 1: boom")
    counter.counts[second] = {"alloc1": 100.5, "alloc2": 200.0}
    status, out, err = _run(["--pythons", f"{first} {second}", "--reference", str(ref)], capsys)
    assert status == 1
    failed = [ln for ln in out.splitlines() if "count failed" in ln]
    assert len(failed) == 1 and "boom" in failed[0] and first in failed[0]
    assert f"{second} (CPython 3.13.0), kvqueue: ok" in out
    assert "alloc1: 100.5 instructions/op vs 100.0 (reduction -0.50 %) ok" in out
    assert "Traceback" not in err
    # UPDATE=1: the interpreter that finished is recorded, the failed one keeps its entry.
    counter.counts[second] = {"alloc1": 99.0, "alloc2": 200.0}
    status, out, _ = _run(
        ["--pythons", f"{first} {second}", "--reference", str(ref), "--update"], capsys
    )
    assert status == 1 and "alloc1: 100.0 -> 99.0" in out
    entries = json.loads(ref.read_text())["entries"]
    by_python = {e["python"]: e["instructions_per_op"]["alloc1"] for e in entries.values()}
    assert by_python == {"3.12.1": 100.0, "3.13.0": 99.0}


def test_the_last_line_says_which_interpreter_failed_and_why(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CI log keeps only the end of the output: the closing line names the failure.
    py310, py311, py312 = (
        _fake_python(tmp_path, f"p{v}", v) for v in ("3.10.1", "3.11.1", "3.12.1")
    )
    ref = tmp_path / "r.json"
    _record(ref, f"{py310} {py311} {py312}")
    capsys.readouterr()
    counter.counts[py310] = BenchError("counted process (zero  */2048) exited 1: boom")
    counter.counts[py311] = {"alloc1": 103.0, "alloc2": 200.0}
    status, out, _ = _run(
        ["--pythons", f"{py310} {py311} {py312}", "--reference", str(ref)], capsys
    )
    assert status == 1
    last = out.splitlines()[-1]
    assert last.startswith("check-queue FAILED: ")
    assert "CPython 3.10.1 ERROR: counted process (zero  */2048) exited 1: boom" in last
    assert (
        "CPython 3.11.1 FAILED: alloc1: 103.0 instructions/op vs 100.0 (reduction -3.00 %)" in last
    )
    assert last.endswith("ok: CPython 3.12.1")
    counter.counts.clear()
    status, out, _ = _run(["--pythons", f"{py310} {py312}", "--reference", str(ref)], capsys)
    assert status == 0 and out.splitlines()[-1] == "check-queue passed: ok: CPython 3.10.1, 3.12.1"


def test_an_entry_recorded_on_another_cpu_says_so(
    tmp_path: Path,
    counter: FakeCounter,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    py = _fake_python(tmp_path, "p312", "3.12.1")
    ref = tmp_path / "r.json"
    amd = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1}
    monkeypatch.setattr(queue_check.hostinfo, "cpu_model", lambda: "AMD EPYC")
    monkeypatch.setattr(queue_check.hostinfo, "cpu_identity", lambda: dict(amd))
    _record(ref, py)
    entry = next(iter(json.loads(ref.read_text())["entries"].values()))
    assert entry["machine"] == {"cpu_model": "AMD EPYC", "cpu": amd}
    capsys.readouterr()
    status, out, _ = _run(["--pythons", py, "--reference", str(ref)], capsys)
    assert status == 0 and "another CPU" not in out
    intel = {"vendor": "GenuineIntel", "family": 6, "model": 207, "stepping": 2}
    monkeypatch.setattr(queue_check.hostinfo, "cpu_model", lambda: "Intel(R) Xeon(R) Processor")
    monkeypatch.setattr(queue_check.hostinfo, "cpu_identity", lambda: dict(intel))
    status, out, _ = _run(["--pythons", py, "--reference", str(ref)], capsys)
    assert status == 0
    assert (
        "recorded on another CPU (AuthenticAMD family 25 model 17 stepping 1; here "
        "GenuineIntel family 6 model 207 stepping 2)" in out
    )


# ------------------------------------------------------------------ the counted worker


def test_the_counted_worker_never_re_enables_the_collector() -> None:
    """A collection after the target loops was counted in some target runs and not in
    others (+107 instructions per operation on CPython 3.13)."""
    spec = {
        "sources": ["kvqueue"],
        "labels": ["kvqueue"],
        "block_source": None,
        "block_mode": "shared",
        "expected_sha256": {},
        "cases": ["alloc1"],
        "pools": [64],
        "seed": 1,
        "case_seed": 1,
        "warmup_ops": 10,
        "target": ["kvqueue", "alloc1", 64, 2],
    }
    collections: list[str] = []

    def note(phase: str, _info: dict[str, int]) -> None:
        collections.append(phase)

    was = gc.isenabled()
    try:
        counted_worker.run_counted(spec)
        gc.callbacks.append(note)
        assert not gc.isenabled()
        # Allocations after the loops start no collection either.
        _ = [[i] for i in range(50_000)]
        assert collections == []
    finally:
        if note in gc.callbacks:
            gc.callbacks.remove(note)
        if was:
            gc.enable()


def test_a_check_names_the_parameters_not_at_their_defaults_before_counting(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28.1: like every measuring command, check-queue prints what it was given
    beyond the defaults once its input is checked (a refusal prints only its own line,
    the test above)."""
    ref = tmp_path / "r.json"
    _record(ref, sys.executable)
    capsys.readouterr()
    status, out, err = _run(["--pythons", sys.executable, "--reference", str(ref)], capsys)
    assert status == 0, out + err
    first = err.strip().splitlines()[0]
    assert first == (
        f"make check-queue: parameters not at their defaults: PYTHONS={sys.executable} "
        f"REFERENCE={ref}"
    )


def test_the_advice_for_a_build_without_an_entry_names_this_reference_and_queue(
    tmp_path: Path, counter: FakeCounter, capsys: pytest.CaptureFixture[str]
) -> None:
    """Followed as printed, the advice recorded kvqueue into the committed reference:
    it named neither REFERENCE nor QUEUE."""
    first = _fake_python(tmp_path, "py312", "3.12.1")
    second = _fake_python(tmp_path, "py313", "3.13.0")
    ref = tmp_path / "r.json"
    queue = _our_queue_file(tmp_path)
    _record(ref, first, queue=queue)
    capsys.readouterr()
    args = ["--pythons", f"{first} {second}", "--reference", str(ref), "--queue", queue]
    _, out, _ = _run(args, capsys)
    (advice,) = [ln for ln in out.splitlines() if "no reference for this build" in ln]
    assert f"UPDATE=1 PYTHONS={second} QUEUE={queue} REFERENCE={ref}`" in advice, advice
