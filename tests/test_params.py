"""One source for every parameter: what the CLI options, every command's ``--help``,
``make help``, the environment each target gets and each command reads, and the notebooks'
``parameters`` cells make of the fields of ``kvqueue.params``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchutil import run_make

from kvqueue import __main__ as cli
from kvqueue.errors import BenchInputError
from kvqueue.measure import run_notebook
from kvqueue.params import (
    bench_params,
    command_params,
    make_vars,
    policy_params,
    report_params,
    spec,
)
from kvqueue.params.spec import ENV_PREFIX, default_of
from kvqueue.stats import paired_stats

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Every command of ``python -m kvqueue``.
COMMANDS = (
    "validate",
    "bench",
    "quick",
    "history",
    "policy",
    "check-queue",
    "regress",
    "report",
    "diffs",
    "sync-notebooks",
    "make-vars",
)
#: Make targets that pass variables to their command (``--from-env``) and whose recipe
#: runs the command alone (``report`` is a file rule: it is left out where a target runs).
VAR_TARGETS = (
    "validate", "bench", "quick", "history", "policy", "check-queue", "regress", "diffs",
)  # fmt: skip
#: A text that Make, or a shell, would change if it evaluated it.
UNEVALUATED = "$(shell echo evaluated) `echo run` 'q' \"d\" $$HOME $HOME"


def _subparser(name: str):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[name]


def _options(name: str) -> set[str]:
    return {a.dest for a in _subparser(name)._actions if a.option_strings} - {"help"}


def _names(fields: list[Any], *leave_out: str) -> set[str]:
    return {f.name for f in fields if f.name not in leave_out}


# ------------------------------------------------------------------ agreement


def test_cli_options_are_the_fields() -> None:
    bench = bench_params.bench_fields()
    bench_cli = {"raw_dir", "no_notebook", "from_env", "wait"}  # WAIT: the machine lock's
    assert _options("bench") == _names(bench) | bench_cli
    assert _options("quick") == _names(bench, "host", "quick") | {"from_env", "wait"}
    history = _names(bench, "variants", "aa", "block_source", "quick")
    assert _options("history") == history | {"releases", "newest", "raw_dir", "from_env", "wait"}
    policy = _names(policy_params.policy_fields())
    assert _options("policy") == policy | {"raw_dir", "from_env", "wait"}
    assert "wait" not in _options("check-queue")  # counts without the machine lock
    settings = _names(report_params.report_fields())
    report = {"raw_dir", "processed_dir", "out", "notebook", "from_env", "cases", "fetch_diffs"}
    assert _options("report") == settings | report


def _parameters_cell_source(path: Path) -> str:
    """The source of a notebook's ``parameters`` cell."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    (cell,) = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


@pytest.mark.parametrize("path", sorted(run_notebook.expected_parameters_cells()), ids=str)
def test_notebook_parameters_cells_are_generated_from_the_fields(path: Path) -> None:
    expected = run_notebook.expected_parameters_cells()[path]
    assert _parameters_cell_source(path) == expected, (
        f"{path.name}'s parameters cell differs from kvqueue.params: run `make notebooks`"
    )


def test_the_bench_notebook_declares_every_value_the_cli_passes() -> None:
    """papermill injects the values after the ``parameters`` cell: a name the cell does
    not declare would reach the notebook untyped, undocumented and unchecked."""
    p = bench_params.make_params(host="grace")
    passed = bench_params.bench_notebook_parameters(bench_params.Checked(p, {}), Path("/r"), "r")
    source = _parameters_cell_source(run_notebook.BENCH_NOTEBOOK_PATH)
    declared = [s.target.id for s in ast.parse(source).body if isinstance(s, ast.AnnAssign)]
    assert sorted(passed) == sorted(declared)


def test_papermill_help_shows_types_and_help() -> None:
    papermill = pytest.importorskip("papermill")
    found = papermill.inspect_notebook(str(run_notebook.BENCH_NOTEBOOK_PATH))
    assert found["processes"]["inferred_type_name"] == "int"
    assert found["processes"]["help"] == "main-phase worker processes (with PRECISION: the pilot)"
    assert found["variants"]["inferred_type_name"] == "list[str]"


def test_notebook_values_round_trip_through_the_parameters() -> None:
    p = bench_params.make_params(host="grace", python="python3", quick=True, cases=["alloc1"])
    checked = bench_params.Checked(p, {"tag": "cpython-311"})
    values = bench_params.bench_notebook_parameters(checked, Path("/raw"), "rid")
    back = bench_params.from_notebook(values)
    assert isinstance(back, bench_params.Checked) and back.params == p
    # Opened by hand (no python_info): defaults count as not given, so quick applies.
    values = {f.name: default_of(f) for f in bench_params.bench_fields()}
    values |= {"host": "grace", "quick": True, "python_info": {}}
    back = bench_params.from_notebook(values)
    assert isinstance(back, bench_params.BenchParams) and back.processes == 2


def test_the_statistics_defaults_are_the_report_settings() -> None:
    """``kvqueue.stats.paired_stats`` imports no parameters: its keyword defaults repeat the
    report's settings, and must not drift from them."""
    settings = report_params.ReportSettings()
    assert settings.confidence == paired_stats.DEFAULT_CONFIDENCE
    assert settings.resamples == paired_stats.DEFAULT_RESAMPLES
    assert settings.seed == paired_stats.DEFAULT_BOOTSTRAP_SEED
    assert settings.delta == paired_stats.DEFAULT_DELTA
    assert settings.method == paired_stats.CI_METHOD


def test_report_settings_parse_like_every_parameter() -> None:
    given = {f.name: None for f in report_params.report_fields()}
    assert report_params.from_text(given) == report_params.ReportSettings()
    given |= {"resamples": "2000", "pairs": [["b", "a"]]}
    settings = report_params.from_text(given)
    assert settings.resamples == 2000 and settings.pairs == (("b", "a"),)
    with pytest.raises(BenchInputError, match="resamples must be a whole number"):
        report_params.from_text({"resamples": "1e4"})


# ------------------------------------------------------------------ help, make help, env


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_help_prints(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help texts with %: a bare % in one crashed `report --help`."""
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
    assert "usage: python -m kvqueue" in capsys.readouterr().out


def test_every_command_is_covered() -> None:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert tuple(sub.choices) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_lists_every_variable_its_command_reads(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    words = set(re.findall(r"[A-Z][A-Z_]*[A-Z]", capsys.readouterr().out))
    missing = [v for v in cli.reads(command) if v not in words]
    assert not missing, f"`{command} --help` does not name {missing}"


def _help_variables(stdout: str) -> dict[str, list[str]]:
    """Target -> its variables, from ``make help``'s "variables of each target" lines."""
    listed: dict[str, list[str]] = {}
    _, _, variables = stdout.partition("variables of each target")
    for line in variables.splitlines()[2:]:
        target, *names = line.split()
        listed.setdefault(target, names)
    return listed


def test_make_help_lists_the_variables_of_every_target() -> None:
    proc = run_make("help")
    assert proc.returncode == 0, proc.stderr
    listed = _help_variables(proc.stdout)
    for target in (*VAR_TARGETS, "report"):
        assert target in listed, f"make help has no variables line for {target}"
        assert listed[target] == cli.reads(target), target
    assert "BOOTSTRAP_PY" in proc.stdout


def _show_env(tmp_path: Path) -> Path:
    """A stand-in interpreter that prints its environment."""
    show = tmp_path / "show-env"
    show.write_text("#!/bin/sh\nenv\n")
    show.chmod(0o755)
    return show


@pytest.mark.parametrize("target", VAR_TARGETS)
def test_make_exports_to_each_target_what_its_command_reads(target: str, tmp_path: Path):
    """Run each target with a stand-in interpreter that prints its environment."""
    show = _show_env(tmp_path)
    # PYTHON runs validate's recipe; a target that does not read it refuses it.
    python = [f"PYTHON={show}"] if "PYTHON" in cli.reads(target) else []
    proc = run_make(target, f"VPY={show}", *python, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    exported = re.findall(rf"^{ENV_PREFIX}(\w+)=", proc.stdout, flags=re.M)
    assert sorted(exported) == sorted(cli.reads(target))


@pytest.mark.parametrize("target", VAR_TARGETS)
def test_make_passes_each_value_as_typed_and_only_as_kvqueue(target: str, tmp_path: Path):
    """Every variable, given on the command line or in the environment, reaches the
    command as ``KVQUEUE_<NAME>`` as typed, and none reaches it under its own name."""
    show = _show_env(tmp_path)
    # PYTHON runs (validate's recipe) and RAW_DIR is the report rule's too: plain texts.
    plain = {"PYTHON": str(show), command_params.RAW_DIR: str(tmp_path / "raw")}
    given = {v: plain.get(v, UNEVALUATED) for v in cli.reads(target)}
    # One variable from the environment (diffs reads RAW_DIR alone: it comes from there).
    first = next(
        (v for v in cli.reads(target) if v not in ("PYTHON", command_params.RAW_DIR)),
        command_params.RAW_DIR,
    )
    env = {"PATH": os.environ["PATH"], first: given[first]}
    proc = run_make(
        target, f"VPY={show}", *(f"{v}={given[v]}" for v in given if v != first), env=env
    )
    assert proc.returncode == 0, proc.stderr
    received = dict(re.findall(r"^(\w+)=(.*)$", proc.stdout, flags=re.M))
    assert {v: received[ENV_PREFIX + v] for v in given} == given
    everyone = {v for vs in make_vars.targets().values() for v in vs}
    assert not everyone & set(received), "a variable reached the recipe under its own name"
    assert not (tmp_path / "raw").exists()


# ------------------------------------------------------------------ the generated include


def _stale(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, older than every declaration (Make remakes it)."""
    path.write_text(text, encoding="utf-8")
    os.utime(path, (0, 0))


_STANDIN_INCLUDE = "VAR_TARGETS := bench\nbench_VARS := STAND_IN\n"


def test_make_reads_an_up_to_date_include_without_starting_python(tmp_path: Path) -> None:
    """An include newer than the declarations is read as it is: with an interpreter that
    cannot run, nothing warns, so no call to `make` pays a Python start."""
    include = tmp_path / "params.mk"
    include.write_text(_STANDIN_INCLUDE, encoding="utf-8")
    proc = run_make("help", f"PARAMS_MK={include}", "BOOTSTRAP_PY=false")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    listed = _help_variables(proc.stdout)
    assert listed["bench"] == ["STAND_IN"] and set(listed) == {"bench", "setup"}


def test_a_failed_remake_keeps_the_previous_include(tmp_path: Path) -> None:
    """A declaration that does not import must not take `make help` (or `make test`,
    which would show why) down with it; with no previous include, Make stops."""
    include = tmp_path / "params.mk"
    _stale(include, _STANDIN_INCLUDE)
    proc = run_make("help", f"PARAMS_MK={include}", "BOOTSTRAP_PY=false")
    assert proc.returncode == 0 and "kept the previous" in proc.stderr, proc.stderr
    assert _help_variables(proc.stdout)["bench"] == ["STAND_IN"]
    proc = run_make("help", f"PARAMS_MK={tmp_path / 'none' / 'params.mk'}", "BOOTSTRAP_PY=false")
    assert proc.returncode != 0


@pytest.mark.slow
@pytest.mark.parametrize("stale", [False, True], ids=["missing", "stale"])
def test_make_writes_the_include_from_the_declarations(stale: bool, tmp_path: Path) -> None:
    """A fresh clone (no include, no .venv) and a changed declaration (an include older
    than it) get the include written by a bare interpreter (``-S``: no site-packages)."""
    include = tmp_path / "make" / "params.mk"
    if stale:
        include.parent.mkdir()
        _stale(include, _STANDIN_INCLUDE)
    proc = run_make("help", f"PARAMS_MK={include}", f"BOOTSTRAP_PY={sys.executable}")
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert include.read_text(encoding="utf-8") == make_vars.fragment()
    assert _help_variables(proc.stdout)["bench"] == cli.reads("bench")
    assert [p.name for p in include.parent.iterdir()] == ["params.mk"]  # no temporary left


@pytest.mark.parametrize("name", ["A B", "X=1", "$(shell id)", "lower", "PATH"])
def test_a_make_variable_that_would_be_make_syntax_is_refused(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(make_vars.READS, "bench", command_params.Reads(extra=(name,)))
    with pytest.raises(ValueError, match="cannot be a Make variable"):
        make_vars.fragment()


class _Recording(dict):
    """An environment that records which ``KVQUEUE_`` variables are read."""

    def __init__(self, base: dict[str, str]) -> None:
        super().__init__(base)
        self.read: set[str] = set()

    def _note(self, key: object) -> None:
        if isinstance(key, str) and key.startswith(ENV_PREFIX):
            self.read.add(key.removeprefix(ENV_PREFIX))

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)


@pytest.mark.parametrize("command", VAR_TARGETS)
def test_from_env_reads_exactly_the_declared_variables(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``--from-env`` really reads (nothing is run: the work is stubbed out)."""
    from kvqueue.ab import queue_check, quick_loop
    from kvqueue.history import history_collect
    from kvqueue.measure import child, interpreter_checks
    from kvqueue.policy import policy_checks
    from kvqueue.sources import loader

    def stop(*_args: Any, **_kwargs: Any) -> Any:
        raise BenchInputError("stopped by the test")

    monkeypatch.setattr(child, "die_with_parent", lambda: None)
    monkeypatch.setattr(loader, "load_variants", stop)
    monkeypatch.setattr(interpreter_checks, "check", stop)
    monkeypatch.setattr(quick_loop, "run_quick", stop)
    monkeypatch.setattr(queue_check, "check", stop)
    monkeypatch.setattr(history_collect, "run_history", stop)
    monkeypatch.setattr(policy_checks, "check", stop)
    monkeypatch.setattr(history_collect, "fetch_history_releases", stop)
    environ = _Recording({k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)})
    environ[ENV_PREFIX + "HOST"] = "h"
    environ[ENV_PREFIX + "BASE"] = environ[ENV_PREFIX + "HEAD"] = "kvqueue"  # regress's
    environ.read.clear()
    monkeypatch.setattr(os, "environ", environ)
    assert cli.main([command, "--from-env"]) == 2
    assert "stopped by the test" in capsys.readouterr().err
    assert sorted(environ.read) == sorted(cli.reads(command))


def test_from_env_takes_no_other_parameter(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bench_params.BUDGET_START_ENV, "")  # the commands set it
    for command in ("bench", "quick", "history", "policy"):
        assert cli.main([command, "--from-env", "--seed", "2"]) == 2
        err = capsys.readouterr().err
        assert err == f"make {command}: --from-env takes no other parameter (got --seed)\n"


# ------------------------------------------------------------------ Make -> CLI verbatim


@pytest.mark.slow
@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("x`touch pwned`", "is not a valid label"),
        ('x" --raw-dir "/elsewhere', "is not a valid label"),
        ("-rf", "is not a valid label"),
        ("$(touch pwned)", "is not a valid label"),
        ("$(shell touch pwned)", "is not a valid label"),  # Make's own syntax: not expanded
    ],
)
def test_make_variables_reach_the_cli_without_a_shell(tmp_path: Path, host: str, words: str):
    proc = subprocess.run(
        ["make", "--no-print-directory", "bench", f"HOST={host}", f"RAW_DIR={tmp_path / 'raw'}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    ours = [ln for ln in proc.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", ln)]
    assert proc.returncode != 0
    assert len(ours) == 1 and ours[0].startswith("make bench: ") and words in ours[0], proc.stderr
    assert repr(host) in ours[0]  # the value arrived whole, as typed
    assert not (REPO_ROOT / "pwned").exists() and not (tmp_path / "raw").exists()


def _from_env(environ: dict[str, str]) -> bench_params.BenchParams:
    return bench_params.from_text(spec.environment_texts(bench_params.bench_fields(), environ))


def test_bool_and_number_texts_are_refused_in_one_line() -> None:
    with pytest.raises(BenchInputError, match="quick must be 1 or 0"):
        bench_params.from_text(
            spec.environment_texts(
                bench_params.bench_fields(), {"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "maybe"}
            )
        )
    with pytest.raises(BenchInputError, match="sample_ms must be a positive number"):
        bench_params.from_text(
            spec.environment_texts(
                bench_params.bench_fields(), {"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "inf"}
            )
        )
    with pytest.raises(BenchInputError, match="sample_ms must be at most"):
        bench_params.from_text(
            spec.environment_texts(
                bench_params.bench_fields(), {"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "1e9"}
            )
        )
    with pytest.raises(BenchInputError, match="pools lists 2048 twice"):
        bench_params.from_text(
            spec.environment_texts(
                bench_params.bench_fields(), {"KVQUEUE_HOST": "h", "KVQUEUE_POOLS": "2048 2048"}
            )
        )
    with pytest.raises(BenchInputError, match="cases lists alloc1 twice"):
        bench_params.from_text(
            spec.environment_texts(
                bench_params.bench_fields(), {"KVQUEUE_HOST": "h", "KVQUEUE_CASES": "alloc1 alloc1"}
            )
        )
    p = bench_params.from_text(
        spec.environment_texts(
            bench_params.bench_fields(),
            {"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "1", "KVQUEUE_AA": ""},
        )
    )
    assert p.quick and not p.aa and p.processes == bench_params.QUICK_OVERRIDES["processes"]


def test_two_variants_with_one_name_are_refused() -> None:
    with pytest.raises(BenchInputError, match="two variants are both called 'x'"):
        bench_params.make_params(host="h", variants=["x=kvqueue", "x=kvqueue:floor"])
    p = bench_params.make_params(
        host="h", variants=["base=kvqueue", "bound=kvqueue:floor"], aa=True
    )
    assert p.labels == ["base", "bound", "base#2"]


def test_one_variant_with_aa_is_an_aa_only_run() -> None:
    p = bench_params.make_params(host="h", variants=["kvqueue"], aa=True)
    assert p.sources == ["kvqueue", "kvqueue"] and p.labels == ["kvqueue", "kvqueue#2"]
    with pytest.raises(BenchInputError, match="at least two variants"):
        bench_params.make_params(host="h", variants=["kvqueue"])


def test_a_run_names_the_parameters_not_at_their_defaults_once_its_input_is_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 28.1: a value that parses but was meant for another run (PROCESSES=2) is
    shown before any measuring; a value equal to the command's default is not; a refused
    input prints its one line and not this one."""
    from kvqueue.measure import interpreter_checks
    from kvqueue.params.command_params import not_defaults

    quick_default = bench_params.QUICK_LOOP_DEFAULTS["processes"]
    line = not_defaults(
        "quick",
        {"processes": str(quick_default), "samples": "5", "variants": "kvqueue vllm==0.32.0"},
    )
    assert line == "parameters not at their defaults: VARIANTS='kvqueue vllm==0.32.0' SAMPLES=5"
    assert not_defaults("bench", {}, RAW_DIR="") == "parameters not at their defaults: none"
    assert "RAW_DIR=/tmp/x" in not_defaults("bench", {}, RAW_DIR="/tmp/x")
    with pytest.raises(BenchInputError):
        interpreter_checks.check(bench_params.make_params(python="/no/such/python"), "shown")
    assert "shown" not in capsys.readouterr().err


def test_a_host_that_differs_only_in_case_from_a_folder_is_noted(tmp_path: Path) -> None:
    """Issue 28.7: HOST=Probe beside a committed probe/ went ahead unflagged."""
    (tmp_path / "probe").mkdir()
    line = cli._announce("bench", {"host": "Probe"}, tmp_path)
    first, note = line.splitlines()
    assert first == "make bench: parameters not at their defaults: HOST=Probe"
    assert note.startswith(f"make bench: note: {tmp_path} holds host probe, which differs")
    assert cli._announce("bench", {"host": "probe"}, tmp_path).count("\n") == 0
