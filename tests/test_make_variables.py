"""Every variable given on Make's command line is read by a goal or refused (issue 28):
a mistyped ``TURNOVER=4`` or ``PROCESS=2`` stops the call in one line that names the
nearest known variable, and runs nothing; the environment is never refused.

The Makefile does the check as it reads itself, against the generated include's lists
and its own settings; ``python -m kvqueue.params.make_vars`` writes the line
(:func:`kvqueue.params.make_vars.refusal`), started only for an unknown name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchutil import make_environment, run_make

from kvqueue import __main__ as cli
from kvqueue.params import make_vars

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Targets that take no variable of their own (only the Makefile's settings). `clean` is
#: left out: were the check ever lost, running it would remove data/processed.
PLAIN_TARGETS = ("help", "test", "test-fast", "lint", "notebooks")


def _stand_in(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in interpreter that prints its environment and leaves a mark when it runs
    (as VPY, the `.venv` tool of every recipe), and the mark's path."""
    mark = tmp_path / "ran"
    show = tmp_path / "show-env"
    show.write_text(f"#!/bin/sh\ntouch '{mark}'\nenv\n", encoding="utf-8")
    show.chmod(0o755)
    return show, mark


def _refused(proc: subprocess.CompletedProcess[str], words: str) -> str:
    """The one line of a refusal (Make's ``Makefile:N: *** ...  Stop.`` around ours)."""
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    return lines[0]


# ------------------------------------------------------------------ refused


@pytest.mark.parametrize(
    ("target", "given", "words"),
    [
        ("quick", "PROCESS=2", "make quick: unknown variable PROCESS (did you mean PROCESSES?)"),
        (
            "policy",
            "TURNOVER=4",
            "make policy: unknown variable TURNOVER (did you mean TURNOVERS?)",
        ),
        ("bench", "host=grace", "make bench: unknown variable host (did you mean HOST?)"),
        ("check-queue", "PYTHON=python3", "unknown variable PYTHON (did you mean PYTHONS?)"),
        ("quick", "QUICK=1", "unknown variable QUICK (a variable of validate, bench, history)"),
        ("bench", "TURNOVER=4", "TURNOVER (did you mean TURNOVERS? a variable of policy)"),
    ],
)
def test_a_mistyped_variable_is_refused_with_the_nearest_name(
    target: str, given: str, words: str, tmp_path: Path
) -> None:
    show, mark = _stand_in(tmp_path)
    line = _refused(run_make(target, given, f"VPY={show}"), words)
    assert f"the variables of {target}: {' '.join(cli.reads(target))}" in line
    assert not mark.exists(), "a recipe ran"


def test_the_issue_s_policy_call_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    show, mark = _stand_in(tmp_path)
    raw = tmp_path / "raw"
    args = ("HOST=x", "TURNOVER=4", "POOL=2048", "PROCESSES=2", "WINDOWS=1", f"RAW_DIR={raw}")
    _refused(run_make("policy", *args, f"VPY={show}"), "TURNOVER (did you mean TURNOVERS?)")
    assert not mark.exists() and not raw.exists()


@pytest.mark.parametrize("target", PLAIN_TARGETS)
def test_a_target_without_variables_refuses_any_but_the_makefile_s(
    target: str, tmp_path: Path
) -> None:
    show, mark = _stand_in(tmp_path)
    line = _refused(run_make(target, "PROCESSES=2", f"VPY={show}"), f"make {target}: unknown")
    assert "the Makefile's own: BOOTSTRAP_PY VENV VPY PARAMS_MK" in line
    assert not mark.exists(), "a recipe ran"


def test_several_unknown_names_are_one_line(tmp_path: Path) -> None:
    show, _ = _stand_in(tmp_path)
    line = _refused(run_make("quick", "PROCESS=2", "SEEDS=3", f"VPY={show}"), "unknown variables")
    assert "PROCESS (did you mean PROCESSES?)" in line and "SEEDS (did you mean SEED?)" in line


def test_a_name_that_is_shell_syntax_runs_nothing(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    name = f"x';touch>{pwned};'"
    _refused(run_make("help", f"{name}=1"), f"unknown variable {name}")
    assert not pwned.exists()


def test_without_python_the_refusal_still_stops_the_call(tmp_path: Path) -> None:
    """An interpreter that cannot run gives no suggestion, but the call is refused."""
    show, mark = _stand_in(tmp_path)
    proc = run_make("quick", "PROCESS=2", f"VPY={show}", "BOOTSTRAP_PY=false")
    _refused(proc, "make quick: unknown variable PROCESS (`make help` lists")
    assert not mark.exists()


# ------------------------------------------------------------------ accepted


def _args_of_refusal(tmp_path: Path, *args: str) -> list[str]:
    """What Make hands the suggestion writer: a stand-in BOOTSTRAP_PY prints its
    arguments, and the refusal is that text (nothing else runs: Make stops there)."""
    echo = tmp_path / "echo-args"
    echo.write_text("#!/bin/sh\nprintf '[%s]' \"$@\"\n", encoding="utf-8")
    echo.chmod(0o755)
    proc = run_make(*args, f"BOOTSTRAP_PY={echo}")
    assert proc.returncode != 0, proc.stderr
    return re.findall(r"\[([^]]*)\]", proc.stderr)


def test_make_asks_only_about_the_names_no_goal_reads(tmp_path: Path) -> None:
    got = _args_of_refusal(tmp_path, "report", "CASES=a", "HOSTS=b", "RUNS=c", "FOO=1")
    assert got == ["-S", "-m", "kvqueue.params.make_vars", "report", got[4], "FOO"]
    assert got[4].split() == ["BOOTSTRAP_PY", "VENV", "VPY", "PARAMS_MK", "CASES"]


def test_a_known_variable_passes(tmp_path: Path) -> None:
    show, mark = _stand_in(tmp_path)
    proc = run_make("quick", "PROCESSES=2", f"VPY={show}")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^KVQUEUE_PROCESSES=2$", proc.stdout, flags=re.M) and mark.exists()


def test_a_variable_is_fine_if_any_goal_reads_it(tmp_path: Path) -> None:
    """quick does not read QUICK; validate does."""
    show, _ = _stand_in(tmp_path)
    proc = run_make("quick", "validate", "QUICK=1", f"VPY={show}", f"PYTHON={show}")
    assert proc.returncode == 0, proc.stderr
    assert "KVQUEUE_QUICK=1" in proc.stdout.splitlines()


def test_the_environment_is_never_refused(tmp_path: Path) -> None:
    """Only the command line counts: PATH, HOME, CI=true, even a typo, are not ours."""
    show, mark = _stand_in(tmp_path)
    env = make_environment(CI="true", TURNOVER="4", PROCESS="2", FOO="1")
    proc = run_make("quick", f"VPY={show}", env=env)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert mark.exists()
    assert run_make("help", env=env).returncode == 0


def test_the_makefile_s_settings_pass_for_every_target(tmp_path: Path) -> None:
    include = REPO_ROOT / ".make" / "params.mk"
    proc = run_make("help", f"VPY={tmp_path}", f"VENV={tmp_path}", f"PARAMS_MK={include}")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_missing_include_asks_the_declarations(tmp_path: Path) -> None:
    """A fresh clone has no include: its names are checked against the declarations,
    then the include is written and the call goes on; a refusal writes nothing."""
    show, mark = _stand_in(tmp_path)
    include = tmp_path / "make" / "params.mk"
    proc = run_make("quick", "PROCESS=2", f"VPY={show}", f"PARAMS_MK={include}")
    _refused(proc, "unknown variable PROCESS (did you mean PROCESSES?)")
    assert not include.exists() and not mark.exists()
    proc = run_make("quick", "PROCESSES=2", f"VPY={show}", f"PARAMS_MK={include}")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert include.read_text(encoding="utf-8") == make_vars.fragment() and mark.exists()


@pytest.mark.slow
def test_a_stale_include_does_not_refuse_a_declared_variable(tmp_path: Path) -> None:
    """An include older than the declarations that lacks a variable declared since."""
    show, _ = _stand_in(tmp_path)
    include = tmp_path / "params.mk"
    include.write_text("VAR_TARGETS := quick\nquick_VARS := STAND_IN\n", encoding="utf-8")
    os.utime(include, (0, 0))
    proc = run_make("quick", "PROCESSES=2", f"VPY={show}", f"PARAMS_MK={include}")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert "KVQUEUE_PROCESSES=2" in proc.stdout.splitlines()


# ------------------------------------------------------------------ the line itself


def test_the_line_is_empty_when_every_name_is_read() -> None:
    assert make_vars.refusal(["bench", "report"], ["VPY"], ["HOST", "HOSTS", "VPY"]) == ""


def test_the_line_lists_each_goal_s_variables_then_the_makefile_s() -> None:
    line = make_vars.refusal(["quick", "report"], ["VPY", "CASES", "VPY"], ["TURNOVERS"])
    assert line == (
        "make quick report: unknown variable TURNOVERS (a variable of policy); "
        f"the variables of quick: {' '.join(cli.reads('quick'))}; "
        f"the variables of report: {' '.join(cli.reads('report'))}; "
        "and the Makefile's own: VPY CASES"
    )


def test_the_module_prints_the_line_and_nothing_when_all_is_known() -> None:
    run = [sys.executable, "-S", "-m", "kvqueue.params.make_vars", "help", "VPY"]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([*run, "VPY"], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout == "" and proc.stderr == ""
    proc = subprocess.run([*run, "VPYY"], capture_output=True, text=True, env=env, check=True)
    assert (
        proc.stdout
        == "make help: unknown variable VPYY (did you mean VPY?); the Makefile's own: VPY\n"
    )


def test_a_raw_dir_that_is_make_syntax_runs_nothing(tmp_path: Path) -> None:
    """The report's RAW_DIR reaches it as typed (Make neither expands nor runs it)."""
    mark = tmp_path / "ran"
    proc = _make_ok(run_make("-n", "report", f"RAW_DIR=$(shell touch {mark})"))
    assert "kvqueue report --from-env" in proc.stdout and not mark.exists()


def _make_ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc
