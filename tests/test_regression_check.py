"""``make regress`` (issue 28, item 8): a change compared with its base by instructions per
operation, exit 1 on a regression beyond a threshold, Markdown ready to post.

The slow tests run the check as a contributor would, with ``make regress``, on a
throwaway git repository holding ``vllm/v1/core/kv_cache_utils.py`` (this project's own
queue and stand-in block, never vLLM's code): a branch with a wasted loop in ``popleft``
must fail and name the case, the counts and the change; a comment-only branch must pass.
The fast ones check the verdicts, the thresholds, the Markdown and the parameters from
made-up counts, with nothing run.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import poolutil
import pytest

from kvqueue import __main__ as cli
from kvqueue import schema
from kvqueue.ab import regression_check
from kvqueue.errors import BenchError, BenchInputError, GateRefused, MachineBusy
from kvqueue.measure import cachegrind
from kvqueue.params import command_params, regression_params
from kvqueue.params.spec import ENV_PREFIX
from kvqueue.sources.release_cache import MEMBER
from kvqueue.subjects import queue_cases

REPO_ROOT = Path(__file__).resolve().parent.parent
SUBJECTS = REPO_ROOT / "kvqueue" / "subjects"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "contributor",
    "GIT_AUTHOR_EMAIL": "contributor@example.invalid",
    "GIT_COMMITTER_NAME": "contributor",
    "GIT_COMMITTER_EMAIL": "contributor@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
#: Two cases keep each run at 7 counts: popappend is the one the wasted loop slows
#: (``popleft``), alloc1 one it leaves alone.
CASES = "alloc1 popappend"


def _environment(**extra: str) -> dict[str, str]:
    """The caller's environment without an outer Make's flags, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return env | extra


def _make(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``make --no-print-directory ARGS`` in the repository."""
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        env=_environment() if env is None else env,
    )


# ------------------------------------------------------------------ the contributor's repo


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env=_environment(**_GIT_ENV),
    )


def _without_imports(path: Path) -> str:
    """A module's text without its ``from __future__`` and kvqueue imports (the two
    files become one module with one ``from __future__`` line on top)."""
    return "".join(
        line
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
        if not line.startswith(("from __future__", "from kvqueue"))
    )


def _queue_file() -> str:
    """``kv_cache_utils.py`` of the contributor: our block class and our queue."""
    return (
        '"""A contributor\'s kv_cache_utils.py (kvqueue-bench test)."""\n\n'
        "from __future__ import annotations\n\n"
        + _without_imports(SUBJECTS / "stand_in_block.py")
        + "\n\n"
        + _without_imports(SUBJECTS / "our_queue.py")
    )


_POPLEFT_DOC = '        """Pop the first free block and reduce ``num_free_blocks`` by 1."""\n'


def _edit(repo: Path, old: str, new: str) -> None:
    path = repo / MEMBER
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.fixture(scope="module")
def contributor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository: ``main`` with the queue, ``slow`` with a wasted loop in
    ``popleft`` (popappend only), ``same`` with a comment added (no code changed),
    ``broken`` whose ``popleft`` leaves the popped block's next link, ``elsewhere`` with
    a change outside the queue and block classes."""
    repo = tmp_path_factory.mktemp("contributor") / "vllm"
    (repo / MEMBER).parent.mkdir(parents=True)
    (repo / MEMBER).write_text(_queue_file(), encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the queue")
    _git(repo, "checkout", "-q", "-b", "slow")
    _edit(
        repo,
        _POPLEFT_DOC,
        _POPLEFT_DOC + "        for _ in range(8):  # wasted\n            pass\n",
    )
    _git(repo, "commit", "-q", "-am", "popleft: a wasted loop")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "checkout", "-q", "-b", "same")
    _edit(repo, _POPLEFT_DOC, _POPLEFT_DOC + "        # Only a comment changes.\n")
    _git(repo, "commit", "-q", "-am", "popleft: a comment")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "checkout", "-q", "-b", "broken")
    _edit(repo, "                first.next_free_block = None\n", "")
    _git(repo, "commit", "-q", "-am", "popleft: leaves the next link")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "checkout", "-q", "-b", "elsewhere")
    with (repo / MEMBER).open("a", encoding="utf-8") as fh:
        fh.write("\n\nSOMETHING_ELSE = 1  # outside the queue and the block\n")
    _git(repo, "commit", "-q", "-am", "kv_cache_utils: outside the classes")
    _git(repo, "checkout", "-q", "main")
    return repo


def test_the_contributor_file_is_a_queue_the_loader_reads(contributor: Path) -> None:
    from kvqueue.sources import loader

    for ref in ("main", "slow", "same", "broken", "elsewhere"):
        (variant,) = loader.load_variants([f"git:{contributor}@{ref}"])
        assert variant.structure == loader.STRUCTURE_SENTINELS and not variant.adapted


_ROW = re.compile(
    r"^\| (?P<case>\w+) \| (?P<pool>[\d,]+) \| (?P<base>[\d,.]+) \| (?P<head>[\d,.]+) \| "
    r"(?P<reduction>[+-][\d.]+) % \| (?P<threshold>[\d.]+) %\\?\*? \| (?P<verdict>[^|]*?) \|$",
    flags=re.M,
)


def _rows(text: str) -> dict[str, dict[str, str]]:
    return {m["case"]: m.groupdict() for m in _ROW.finditer(text)}


def _regress(repo: Path, head: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m kvqueue regress`` as a contributor types it in their checkout (``.``),
    with two cases and a short gate: its own exit status (``make regress`` exits 2 on
    any failure, Make's status)."""
    python = str(REPO_ROOT / ".venv" / "bin" / "python")
    options = ["--base", "git:.@main", "--head", f"git:.@{head}", "--cases", CASES]
    options += ["--gate-ops", "2000", "--out", str(out)]
    return subprocess.run(
        [python, "-m", "kvqueue", "regress", *options],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=900,
        env=_environment(),
    )


def _regress_ok(
    repo: Path, head: str, folder: Path, status: int
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """:func:`_regress` into ``folder/regress.md``, which must exit ``status``: the
    process, the Markdown written and its first line."""
    out = folder / "regress.md"
    proc = _regress(repo, head, out)
    assert proc.returncode == status, proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    return proc, text, text.splitlines()[0]


@pytest.mark.slow
def test_a_branch_that_regresses_fails_and_names_the_case(
    contributor: Path, tmp_path: Path
) -> None:
    proc, text, first = _regress_ok(contributor, "slow", tmp_path, 1)
    assert proc.stdout == text
    assert "FAILED" in first and "popappend (pool 2,048)" in first and "alloc1" not in first
    rows = _rows(text)
    assert set(rows) == set(CASES.split())
    pop = rows["popappend"]
    base, head = (float(pop[k].replace(",", "")) for k in ("base", "head"))
    # 8 wasted iterations per popleft: ~2,000 instructions more on ~2,400 (3.11.7: -82 %).
    assert head > 1.3 * base and float(pop["reduction"]) < -30
    assert f"{pop['base']} → {pop['head']} instructions/op" in first
    assert f"reduction {pop['reduction']} %" in first and "**regressed**" in pop["verdict"]
    assert rows["alloc1"]["verdict"].strip() == "ok"
    assert abs(float(rows["alloc1"]["reduction"])) < regression_params.DEFAULT_THRESHOLD_PCT
    # The sources with their commits and digests, and the command pinned to them.
    commit = subprocess.run(
        ["git", "-C", str(contributor), "rev-parse", "slow"], capture_output=True, text=True
    ).stdout.strip()
    assert f"@{commit}:{MEMBER}" in text and f"HEAD=git:{contributor.resolve()}@{commit}" in text
    assert re.search(r"`[0-9a-f]{64}`", text)
    assert "make -C kvqueue-bench regress" in text and f"CASES='{CASES}'" in text


@pytest.mark.slow
def test_a_comment_only_branch_passes(contributor: Path, tmp_path: Path) -> None:
    """Through ``make regress``, as the README and the CI steps run it."""
    out = tmp_path / "regress.md"
    proc = _make(
        "regress",
        f"BASE=git:{contributor}@main",
        f"HEAD=git:{contributor}@same",
        f"CASES={CASES}",
        "GATE_OPS=2000",
        f"OUT={out}",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    assert proc.stdout == text
    assert text.splitlines()[0].startswith(
        "**Instruction-count regression check, SUBJECT=queue: passed**"
    )
    rows = _rows(text)
    assert set(rows) == set(CASES.split())
    assert all(r["verdict"].strip() == "ok" for r in rows.values()), rows


@pytest.mark.slow
def test_a_head_that_breaks_the_contract_exits_3_and_out_says_why(
    contributor: Path, tmp_path: Path
) -> None:
    proc, text, first = _regress_ok(contributor, "broken", tmp_path, 3)
    assert "REFUSED by the validation gate" in first and "gate FAIL head" in first
    assert "gate FAIL base" not in text
    # The gate's report, its pair of fields named (issue 36).
    assert "(prev, next) expected: (None, None)" in text
    assert text.rstrip().endswith("exit status 3, refused by the validation gate -->")
    assert proc.stdout == ""


@pytest.mark.slow
def test_identical_class_texts_are_named_in_one_line_not_counted(
    contributor: Path, tmp_path: Path
) -> None:
    proc, text, first = _regress_ok(contributor, "elsewhere", tmp_path, 0)
    assert "SUBJECT=queue: identical code, nothing counted**" in first
    assert "SUBJECT=pool counts vllm/v1/core/block_pool.py" in first
    assert not _rows(text) and "count 1/" not in proc.stderr


# ------------------------------------------------------------------ the pool subject


@pytest.fixture(scope="module")
def pool_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of our test pool (tests/pools): ``main``, and ``slow`` with a
    wasted loop in ``get_new_blocks`` (block_pool.py only)."""
    repo = tmp_path_factory.mktemp("pool-contributor") / "vllm"
    pool = poolutil.write_fixture_pool(repo / "vllm" / "v1" / "core")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the pool")
    _git(repo, "checkout", "-q", "-b", "slow")
    taken = "        taken = self.free_block_queue.popleft_n(num_blocks)\n"
    text = pool.read_text(encoding="utf-8")
    assert taken in text
    wasted = "        for _ in range(20):  # wasted\n            pass\n"
    pool.write_text(text.replace(taken, wasted + taken), encoding="utf-8")
    _git(repo, "commit", "-q", "-am", "get_new_blocks: a wasted loop")
    _git(repo, "checkout", "-q", "main")
    return repo


@pytest.mark.slow
def test_a_change_in_block_pool_py_is_counted_by_the_pool_subject(
    pool_repo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "regress.md"
    proc = _make(
        "regress",
        f"BASE=git:{pool_repo}@main",
        f"HEAD=git:{pool_repo}@slow",
        "SUBJECT=pool",
        "CASES=loop10",
        f"OUT={out}",
        timeout=900,
    )
    # Make's own status for a failed recipe; the command's (1) is in its Error line.
    assert proc.returncode == 2 and "Error 1" in proc.stderr, proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith("**Instruction-count regression check, SUBJECT=pool: FAILED**")
    assert "loop10 (pool 2,048)" in first and "more instructions" in first
    assert float(_rows(text)["loop10"]["reduction"]) < -1
    assert ":vllm/v1/core/block_pool.py" in text and "SUBJECT=pool" in text


# ------------------------------------------------------------------ verdicts (nothing run)


def _count_row(label: str, case: str, run: str, ir: int, loops: int = 0) -> dict[str, Any]:
    """One cachegrind row at pool 2,048 (no cache simulation)."""
    per_loop = queue_cases.ops_per_loop(case, 2048) if run == "target" else 0
    row = dict.fromkeys(schema.COUNT_EVENTS, "")
    row |= {"case": case, "pool": 2048, "label": label, "run": run, "loops": loops}
    return row | {"per_loop": per_loop, "Ir": ir}


def _rows_of(per_op: dict[tuple[str, str], float], spread: float = 0.0) -> list[dict[str, Any]]:
    """cachegrind rows that give ``per_op[(label, case)]`` instructions per operation at
    pool 2,048, the first label's second zero run ``spread`` per operation of its first
    case apart from its zero run."""
    zero = 700_000_000
    labels = list(dict.fromkeys(label for label, _ in per_op))
    rows = [_count_row(label, cachegrind.ALL_CASES, "zero", zero) for label in labels]
    for (label, case), value in per_op.items():
        loops = cachegrind.target_loops(case, 2048)
        ops = loops * queue_cases.ops_per_loop(case, 2048)
        rows.append(_count_row(label, case, "target", zero + round(value * ops), loops))
        if not any(r["run"] == "zero2" for r in rows):
            rows.append(
                _count_row(label, cachegrind.ALL_CASES, "zero2", zero + round(spread * ops))
            )
    return rows


def _judge(per_op: dict[tuple[str, str], float], per_case: dict[str, float], spread: float = 0.0):
    return regression_check.judge(_rows_of(per_op, spread), per_case, "base", "head")


def test_a_cell_above_its_threshold_regresses_and_below_minus_it_improves() -> None:
    cells, resolution = _judge(
        {
            ("base", "alloc1"): 3000.0,
            ("head", "alloc1"): 3030.0,  # 1.0 % more: reduction -1.0 %
            ("base", "mix"): 4000.0,
            ("head", "mix"): 4008.0,  # reduction -0.2 %
            ("base", "remove"): 2000.0,
            ("head", "remove"): 1900.0,  # 5 % fewer: reduction +5 %
        },
        {"alloc1": 0.5, "mix": 0.5, "remove": 0.5},
    )
    by = {c.case: c for c in cells}
    assert [c.case for c in cells] == ["alloc1", "mix", "remove"]  # the bench's order
    assert by["alloc1"].verdict == regression_check.REGRESSED
    # The project's one sign (docs/design.md §5): a reduction, negative = more.
    assert by["alloc1"].reduction_pct == pytest.approx(-1.0, abs=1e-3)
    assert by["remove"].reduction_pct == pytest.approx(5.0, abs=1e-3)
    assert by["mix"].verdict == regression_check.OK
    assert by["remove"].verdict == regression_check.IMPROVED
    assert resolution == 0.0 and not any(c.raised for c in cells)


def test_a_per_case_threshold_decides_its_case_alone() -> None:
    per_op = {("base", "alloc1"): 3000.0, ("head", "alloc1"): 3030.0}
    per_op |= {("base", "mix"): 4000.0, ("head", "mix"): 4008.0}
    cells, _ = _judge(per_op, {"alloc1": 2.0, "mix": 0.1})
    assert {c.case: c.verdict for c in cells} == {"alloc1": "ok", "mix": "regressed"}


def test_a_threshold_is_never_below_ten_times_the_measured_resolution() -> None:
    # Two identical zero runs 3 instructions per operation apart: 10 x 3 / 3000 = 1 %.
    per_op = {("base", "alloc1"): 3000.0, ("head", "alloc1"): 3024.0}  # reduction -0.8 %
    cells, resolution = _judge(per_op, {"alloc1": 0.5}, spread=3.0)
    (cell,) = cells
    assert resolution == pytest.approx(3.0, abs=1e-3)
    assert cell.raised and cell.threshold_pct == pytest.approx(1.0, abs=1e-3)
    assert cell.verdict == "ok"


def _gate_result(label: str, ref: str, commit: str, sha: str = "c" * 64) -> dict[str, Any]:
    """A queue's gate result as ``validate --json`` gives it (the fields read here)."""
    return {
        "label": label,
        "sha256": sha,
        "provenance": {
            "label": label,
            "source": f"git:/src/vllm@{ref}",
            "resolved_path": f"/src/vllm@{commit}:{MEMBER} (ref {ref})",
            "class_sha256": sha,
            "block_source": "git:/src/vllm@main",
            "block_class_sha256": "b" * 64,
        },
    }


def _comparison(
    cells: list[regression_check.CellVerdict], head_commit: str = "2" * 40
) -> regression_check.Comparison:
    return regression_check.Comparison(
        cells=tuple(cells),
        resolution=0.024,
        gate=(_gate_result("base", "main", "1" * 40), _gate_result("mine", "mine", head_commit)),
        python={"implementation": "CPython", "version": "3.11.7", "executable": "/py/python3"},
        valgrind=cachegrind.Valgrind("/usr/bin/valgrind", "valgrind-3.19.0", False),
        seconds=61.0,
        identical=not cells,
    )


def test_the_markdown_names_the_case_the_counts_the_change_and_the_sources() -> None:
    given = {
        "base": "git:/src/vllm@main",
        "head": "mine=git:/src/vllm@mine",
        "thresholds": "alloc1=2",
        "cases": "alloc1 popappend",
    }
    r = regression_params.from_text(given)
    per_op = {("base", "alloc1"): 3287.7, ("mine", "alloc1"): 3288.1}
    per_op |= {("base", "popappend"): 2408.7, ("mine", "popappend"): 4390.9}
    cells, _ = regression_check.judge(_rows_of(per_op), r.per_case, "base", "mine")
    comparison = _comparison(cells)
    text = regression_check.markdown(r, comparison)
    lines = text.splitlines()
    assert lines[0] == (
        "**Instruction-count regression check, SUBJECT=queue: FAILED**: 1 of 2 cells "
        "regressed beyond their threshold: popappend (pool 2,048) 2,408.7 → 4,390.9 "
        "instructions/op (reduction -82.29 %: 82.29 % more instructions, threshold 1 %)."
    )
    assert "| -82.29 % |" in text and "+82.29" not in text
    rows = _rows(text)
    assert rows["popappend"]["verdict"] == "**regressed**"
    assert rows["alloc1"]["threshold"] == "2" and rows["alloc1"]["verdict"] == "ok"
    assert f"@{'2' * 40}:{MEMBER}" in text and "c" * 64 in text and "b" * 64 in text
    assert "valgrind-3.19.0" in text and "CPython 3.11.7" in text and "0.024" in text
    assert "BASE=git:/src/vllm@" + "1" * 40 in text
    assert "HEAD=mine=git:/src/vllm@" + "2" * 40 in text
    assert "THRESHOLDS=alloc1=2" in text and "PYTHON=/py/python3" in text
    assert comparison.exit_status() == 1


def test_a_passing_check_says_so_with_its_largest_change() -> None:
    cells, _ = _judge(
        {
            ("base", "mix"): 4000.0,
            ("head", "mix"): 4001.6,
            ("base", "alloc1"): 3000.0,
            ("head", "alloc1"): 2999.0,
        },
        {"mix": 0.5, "alloc1": 0.5},
    )
    line = regression_check.verdict_line(cells)
    assert line == (
        "**Instruction-count regression check, SUBJECT=queue: passed**: no cell above its "
        "threshold (lowest reduction -0.04 %, mix (pool 2,048))."
    )
    assert _comparison(cells).exit_status() == 0


# ------------------------------------------------------------------ parameters


def test_unnamed_sources_are_labelled_base_and_head_so_one_source_may_be_both() -> None:
    r = regression_params.from_text({"base": "kvqueue", "head": "kvqueue"})
    assert r.bench.labels == ["base", "head"] and r.bench.metric == "instructions"
    assert r.bench.pools == (2048,) and r.bench.cases == schema.CASES
    assert r.per_case == dict.fromkeys(schema.CASES, regression_params.DEFAULT_THRESHOLD_PCT)
    named = regression_params.from_text({"base": "main=kvqueue", "head": "kvqueue:floor"})
    assert named.bench.labels == ["main", "head"]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"base": None}, "BASE is missing"),
        ({"head": " "}, "HEAD is missing"),
        ({"base": "kvqueue kvqueue:floor", "head": "kvqueue"}, "BASE takes one source"),
        ({"threshold": "0"}, "THRESHOLD must be a percentage above 0"),
        ({"threshold": "nan"}, "THRESHOLD must be a percentage above 0"),
        ({"thresholds": "alloc1"}, "'alloc1' is not CASE=PCT"),
        ({"thresholds": "aloc1=1"}, "'aloc1' is not a counted case"),
        ({"thresholds": "remove=1", "cases": "alloc1"}, "'remove' is not a counted case"),
        ({"thresholds": "mix=1 mix=2"}, "THRESHOLDS names mix twice"),
        ({"thresholds": "mix=x"}, "'x' is not a number"),
        ({"thresholds": "mix=-1"}, "THRESHOLDS mix must be a percentage"),
        ({"cases": "alloc03"}, "unknown case(s) alloc03 of subject queue: alloc03: N of"),
        ({"base": "a=kvqueue", "head": "a=kvqueue:floor"}, "two variants are both called 'a'"),
    ],
)
def test_bad_parameters_are_refused_in_one_line(given: dict[str, str | None], words: str):
    texts = {"base": "kvqueue", "head": "kvqueue:floor", **given}
    with pytest.raises(BenchInputError, match=re.escape(words)):
        regression_params.from_text(texts)


def test_bad_input_exits_2_in_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["regress", "--head", "kvqueue"]) == 2
    assert capsys.readouterr().err.startswith("make regress: BASE is missing")
    missing = tmp_path / "no-repo"
    argv = ["regress", "--base", f"git:{missing}@main", "--head", "kvqueue"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "does not exist" in err, err
    argv = ["regress", "--base", "kvqueue", "--head", "kvqueue", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "is a folder" in capsys.readouterr().err
    # Once the sources are being read, OUT says why the check stopped (for CI's comment).
    out = tmp_path / "regress.md"
    argv = ["regress", "--base", f"git:{missing}@main", "--head", "kvqueue", "--out", str(out)]
    assert cli.main(argv) == 2
    wrote, error = capsys.readouterr().err.splitlines()
    assert wrote == f"regress: wrote {out}" and "does not exist" in error
    first = out.read_text(encoding="utf-8").splitlines()[0]
    assert "not run, bad input**" in first and "does not exist" in first


def test_the_command_is_declared_once_for_the_cli_make_and_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What tests/test_params.py checks of every other command, for ``regress``."""
    variables = cli.reads("regress")
    assert variables == [
        "BASE", "HEAD", "THRESHOLD", "THRESHOLDS", "OUT",
        "PYTHON", "CASES", "POOLS", "BLOCK_MODE", "GATE_OPS", "SUBJECT", "WAIT",
    ]  # fmt: skip
    with pytest.raises(SystemExit):
        cli.main(["regress", "--help"])
    words = set(re.findall(r"[A-Z][A-Z_]*[A-Z]", capsys.readouterr().out))
    assert not [v for v in variables if v not in words]
    # make exports exactly these to the recipe, as typed, and only as KVQUEUE_<NAME>.
    show = tmp_path / "show-env"
    show.write_text("#!/bin/sh\nenv\n", encoding="utf-8")
    show.chmod(0o755)
    typed = "$(shell echo evaluated) `echo run` $$HOME"
    given = (f"VPY={show}", f"BASE={typed}", "HEAD=git:.@mine", "POOLS=64")
    proc = _make("regress", *given, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    received = dict(re.findall(r"^(\w+)=(.*)$", proc.stdout, flags=re.M))
    exported = sorted(k.removeprefix(ENV_PREFIX) for k in received if k.startswith(ENV_PREFIX))
    assert exported == sorted(variables)
    assert received[ENV_PREFIX + "BASE"] == typed and received[ENV_PREFIX + "POOLS"] == "64"
    assert "BASE" not in received and "HEAD" not in received


def test_a_mistyped_variable_of_make_regress_is_refused(tmp_path: Path) -> None:
    proc = _make("regress", "TRESHOLD=1", f"VPY={tmp_path / 'never-runs'}")
    assert proc.returncode != 0
    assert "make regress: unknown variable TRESHOLD (did you mean THRESHOLD?)" in proc.stderr


def test_from_env_reads_exactly_the_declared_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[regression_params.Regress] = []

    def stop(r: regression_params.Regress, announce: str = "") -> int:
        seen.append(r)
        raise BenchInputError("stopped by the test")

    monkeypatch.setattr(regression_check, "run_regress", stop)
    for name in command_params.READS["regress"].variables():
        monkeypatch.delenv(ENV_PREFIX + name, raising=False)
    monkeypatch.setenv(ENV_PREFIX + "BASE", "kvqueue")
    monkeypatch.setenv(ENV_PREFIX + "HEAD", "kvqueue:floor")
    monkeypatch.setenv(ENV_PREFIX + "THRESHOLDS", "mix=0.2")
    monkeypatch.setenv(ENV_PREFIX + "CASES", "mix remove")
    assert cli.main(["regress", "--from-env"]) == 2
    assert "stopped by the test" in capsys.readouterr().err
    (r,) = seen
    assert r.per_case == {"mix": 0.2, "remove": regression_params.DEFAULT_THRESHOLD_PCT}
    assert r.bench.variants == ("base=kvqueue", "head=kvqueue:floor")
    assert not math.isnan(r.params.threshold)


# ------------------------------------------------------------------ CI: statuses, OUT


def test_identical_code_is_one_line_saying_where_the_change_may_be() -> None:
    r = regression_params.from_text({"base": "git:/src/vllm@main", "head": "git:/src/vllm@mine"})
    text = regression_check.markdown(r, _comparison([]))
    first = text.splitlines()[0]
    assert first.startswith(
        "**Instruction-count regression check, SUBJECT=queue: identical code, nothing counted**"
    )
    assert "no cell can regress" in first and "SUBJECT=pool counts" in first
    assert "passed" not in first and not _rows(text)
    same = regression_check.markdown(r, _comparison([], head_commit="1" * 40)).splitlines()[0]
    assert f"HEAD and BASE resolved to one commit ({'1' * 40}): check the refs" in same
    assert text.rstrip().endswith("exit status 0, passed -->")


def test_same_code_is_what_the_workers_run() -> None:
    base = _gate_result("base", "main", "1" * 40)
    assert regression_check.same_code([base, _gate_result("head", "x", "2" * 40)])
    assert not regression_check.same_code([base, _gate_result("head", "x", "2" * 40, "d" * 64)])
    own_block = _gate_result("head", "x", "2" * 40)
    own_block["provenance"]["block_class_sha256"] = "e" * 64  # BLOCK_MODE=own
    assert not regression_check.same_code([base, own_block])


def test_the_pool_subject_takes_the_route_of_quick_and_bench() -> None:
    r = regression_params.from_text(
        {"base": "git:/v@main", "head": "git:/v@mine", "subject": "pool"}
    )
    assert r.bench.subject == schema.SUBJECT_POOL and r.bench.cases == schema.POOL_CASES
    assert r.bench.labels == ["pool:base", "pool:head"]
    assert set(r.per_case) == set(schema.POOL_CASES)
    loop = regression_params.from_text(
        {"base": "a", "head": "b", "subject": "pool", "thresholds": "loop10=2"}
    )
    assert loop.per_case["loop10"] == 2.0
    with pytest.raises(BenchInputError, match="'alloc1' is not a counted case"):
        regression_params.from_text(
            {"base": "a", "head": "b", "subject": "pool", "thresholds": "alloc1=2"}
        )
    lines = regression_check.reproduce_command(r, ("git:/v@1", "git:/v@2"), "/py")
    assert "SUBJECT=pool" in lines[-1] and "CASES" not in lines[-1]


_GATE_REPORT = (
    "validation gate refused a variant; nothing was timed\n"
    "gate FAIL head: 1,200 ops\n"
    "    operation #3 popleft(): block 4 is not in the queue but its links are not cleared\n"
    "    (prev, next) expected: (None, None)\n"
    "    (prev, next) got:      (None, 9)"
)


@pytest.mark.parametrize(
    ("error", "status", "first_words"),
    [
        (BenchInputError("no such commit"), 2, "not run, bad input**: no such commit"),
        (
            GateRefused(_GATE_REPORT, failure="gate FAIL head: 1,200 ops: operation #3"),
            3,
            "REFUSED by the validation gate**: a source breaks the contract, so nothing was "
            "counted: gate FAIL head: 1,200 ops: operation #3",
        ),
        (BenchError("a counted process died"), 4, "not counted**: a counted process died"),
        (
            MachineBusy("another bench is running on this machine (pid 1, make quick)"),
            4,
            "not counted**: another bench is running on this machine",
        ),
    ],
)
def test_each_outcome_exits_its_own_status_and_out_says_why(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    error: Exception,
    status: int,
    first_words: str,
) -> None:
    def stopped(r: regression_params.Regress, announce: str = "") -> regression_check.Comparison:
        raise error

    monkeypatch.setattr(regression_check, "compare", stopped)
    out = tmp_path / "regress.md"
    argv = ["regress", "--base", "git:/src/vllm@main", "--head", "kvqueue", "--out", str(out)]
    assert cli.main(argv) == status
    assert set(regression_params.EXIT_STATUSES) == {0, 1, 2, 3, 4}
    err = capsys.readouterr().err
    assert f"make regress: {str(error).splitlines()[0]}" in err
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith(
        f"**Instruction-count regression check, SUBJECT=queue: {first_words}"
    )
    assert "BASE=git:/src/vllm@main" in text and "SUBJECT=queue" in text
    meaning = regression_params.EXIT_STATUSES[status].split(":")[0]
    assert text.rstrip().endswith(f"exit status {status}, {meaning} -->")
    if status == 3:
        assert "(prev, next) got:      (None, 9)" in text


def test_out_replaces_only_its_own_earlier_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The rule of TRACE_OUT (an existing file is never replaced), but for the command's
    own earlier output: CI reruns a check into one OUT."""

    def stopped(r: regression_params.Regress, announce: str = "") -> regression_check.Comparison:
        raise BenchError("a counted process died")

    monkeypatch.setattr(regression_check, "compare", stopped)

    def regress(out: Path | str) -> int:
        return cli.main(["regress", "--base", "kvqueue", "--head", "kvqueue", "--out", str(out)])

    readme = tmp_path / "README.md"
    readme.write_text("# a file of the contributor\n", encoding="utf-8")
    assert regress(readme) == 2
    assert readme.read_text(encoding="utf-8") == "# a file of the contributor\n"
    assert "is not an earlier make regress output: not overwritten" in capsys.readouterr().err
    out = tmp_path / "regress.md"
    assert regress(out) == 4 and out.read_text(encoding="utf-8").startswith("**")
    assert regress(out) == 4  # its own earlier output: replaced
    link = tmp_path / "link.md"
    link.symlink_to(out)
    for refused in (link, Path(os.devnull), tmp_path):
        capsys.readouterr()
        assert regress(refused) == 2
        assert "OUT: " in capsys.readouterr().err
    assert not (tmp_path / "regress.md.tmp").exists()


def test_the_readme_ci_recipes_run_on_every_file_read_for_every_subject() -> None:
    """The GitHub Actions job triggers on each file a subject reads, and both recipes
    check every subject (a subject added to kvqueue.schema.SUBJECTS must be added here)."""
    from fnmatch import fnmatch

    from kvqueue.sources.release_cache import POOL_MEMBERS

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### A regression check for your change") :]
    section = section[: section.index("\n### ")]
    (paths,) = re.findall(r"paths: \[(.*)\]", section)
    patterns = [p.strip().strip('"') for p in paths.split(",")]
    for member in (MEMBER, *POOL_MEMBERS):
        assert any(fnmatch(member, p) for p in patterns), member
    loops = re.findall(r"for subject in ([\w ]+); do", section)
    assert len(loops) == 2 and all(loop.split() == list(schema.SUBJECTS) for loop in loops)
    # Both post the Markdown whatever the status: from the command, not Make's 2.
    assert "make -C /tmp/kvqueue-bench regress" not in section
    assert section.count("-m kvqueue regress \\\n") == 1  # GitHub Actions
    assert section.count("-m kvqueue regress --subject") == 1  # Buildkite
