"""One source for every parameter: the fields of ``kvqueue.params`` against the Makefile,
the CLI options, every command's ``--help``, ``make help``, the environment each command
reads, and the notebooks' ``parameters`` cells.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvqueue import __main__ as cli
from kvqueue.analysis import stats
from kvqueue.bench import notebook
from kvqueue.errors import BenchInputError
from kvqueue.params import bench as bench_params
from kvqueue.params import check_queue as check_queue_params
from kvqueue.params import policy as policy_params
from kvqueue.params import report as report_params
from kvqueue.params.spec import ENV_PREFIX, default_of, spec_of

REPO_ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = REPO_ROOT / "Makefile"
#: Every command of ``python -m kvqueue``.
COMMANDS = (
    "validate",
    "bench",
    "quick",
    "history",
    "policy",
    "check-queue",
    "report",
    "sync-notebooks",
)
#: Make targets that pass variables to their command (``--from-env``).
VAR_TARGETS = ("validate", "bench", "quick", "history", "policy", "check-queue")
#: (Makefile list, the fields it must name in order).
FIELD_LISTS: dict[str, Callable[[], list[Any]]] = {
    "BENCH_VARS": bench_params.bench_fields,
    "POLICY_VARS": policy_params.policy_fields,
    "CHECK_QUEUE_VARS": check_queue_params.check_queue_fields,
}


def _subparser(name: str):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[name]


def _options(name: str) -> set[str]:
    return {a.dest for a in _subparser(name)._actions if a.option_strings} - {"help"}


def _names(fields: list[Any], *leave_out: str) -> set[str]:
    return {f.name for f in fields if f.name not in leave_out}


# ------------------------------------------------------------------ agreement


@pytest.mark.parametrize("listed_as", sorted(FIELD_LISTS))
def test_makefile_variables_are_the_fields(listed_as: str) -> None:
    text = MAKEFILE.read_text(encoding="utf-8")
    match = re.search(rf"^{listed_as} := ((?:.*\\\n)*.*)$", text, flags=re.M)
    assert match, f"Makefile has no {listed_as} list"
    listed = match.group(1).replace("\\\n", " ").split()
    makes = [spec_of(f).make for f in FIELD_LISTS[listed_as]()]
    assert listed == makes
    declared = re.findall(r"^([A-Z_]+)\s*\?=", text, flags=re.M)
    assert set(makes) <= set(declared), f"a variable of {listed_as} has no `?=` default"


def test_cli_options_are_the_fields() -> None:
    bench = bench_params.bench_fields()
    assert _options("bench") == _names(bench) | {"raw_dir", "no_notebook", "from_env"}
    assert _options("quick") == _names(bench, "host", "quick") | {"from_env"}
    history = _names(bench, "variants", "aa", "block_source", "quick")
    assert _options("history") == history | {"releases", "newest", "raw_dir", "from_env"}
    assert _options("policy") == _names(policy_params.policy_fields()) | {"raw_dir", "from_env"}
    settings = _names(report_params.report_fields())
    report = {"raw_dir", "processed_dir", "out", "notebook", "from_env", "cases"}
    assert _options("report") == settings | report


@pytest.mark.parametrize("path", sorted(notebook.expected_parameters_cells()), ids=str)
def test_notebook_parameters_cells_are_generated_from_the_fields(path: Path) -> None:
    expected = notebook.expected_parameters_cells()[path]
    assert notebook.parameters_cell_source(path) == expected, (
        f"{path.name}'s parameters cell differs from kvqueue.params: run `make notebooks`"
    )


def test_bench_notebook_parameter_names_are_the_fields() -> None:
    source = notebook.parameters_cell_source(notebook.BENCH_NOTEBOOK_PATH)
    names = [s.target.id for s in ast.parse(source).body if isinstance(s, ast.AnnAssign)]
    assert names == [f.name for f in bench_params.bench_fields()] + list(
        bench_params.BENCH_NOTEBOOK_EXTRA
    )


def test_papermill_help_shows_types_and_help() -> None:
    papermill = pytest.importorskip("papermill")
    found = papermill.inspect_notebook(str(notebook.BENCH_NOTEBOOK_PATH))
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
    """``kvqueue.analysis.stats`` imports no parameters: its keyword defaults repeat the
    report's settings, and must not drift from them."""
    settings = report_params.ReportSettings()
    assert settings.confidence == stats.DEFAULT_CONFIDENCE
    assert settings.resamples == stats.DEFAULT_RESAMPLES
    assert settings.seed == stats.DEFAULT_BOOTSTRAP_SEED
    assert settings.delta == stats.DEFAULT_DELTA
    assert settings.method == stats.CI_METHOD


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


def test_make_help_lists_the_variables_of_every_target() -> None:
    proc = subprocess.run(
        ["make", "--no-print-directory", "help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=True,
    )
    listed = {}
    _, _, variables = proc.stdout.partition("variables of each target")
    for line in variables.splitlines():
        words = line.split()
        if words and words[0] in VAR_TARGETS:
            listed.setdefault(words[0], words[1:])
    for target in VAR_TARGETS:
        assert target in listed, f"make help has no variables line for {target}"
        assert sorted(listed[target]) == sorted(cli.reads(target)), target
    assert "BOOTSTRAP_PY" in proc.stdout


@pytest.mark.parametrize("target", VAR_TARGETS)
def test_make_exports_to_each_target_what_its_command_reads(target: str, tmp_path: Path):
    """Run each target with a stand-in interpreter that prints its environment."""
    show = tmp_path / "show-env"
    show.write_text("#!/bin/sh\nenv\n")
    show.chmod(0o755)
    proc = subprocess.run(
        ["make", "--no-print-directory", target, f"VPY={show}", f"PYTHON={show}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
        check=True,
    )
    exported = re.findall(rf"^{ENV_PREFIX}(\w+)=", proc.stdout, flags=re.M)
    assert sorted(exported) == sorted(cli.reads(target))


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
    from kvqueue import child
    from kvqueue.bench import check_queue, quick
    from kvqueue.bench import checks as bench_checks
    from kvqueue.history import collect as history_collect
    from kvqueue.policy import checks as policy_checks
    from kvqueue.sources import loader

    def stop(*_args: Any, **_kwargs: Any) -> Any:
        raise BenchInputError("stopped by the test")

    monkeypatch.setattr(child, "die_with_parent", lambda: None)
    monkeypatch.setattr(loader, "load_variants", stop)
    monkeypatch.setattr(bench_checks, "check", stop)
    monkeypatch.setattr(quick, "run_quick", stop)
    monkeypatch.setattr(check_queue, "check", stop)
    monkeypatch.setattr(history_collect, "run_history", stop)
    monkeypatch.setattr(policy_checks, "check", stop)
    environ = _Recording({k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)})
    environ[ENV_PREFIX + "HOST"] = "h"
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


def test_bool_and_number_texts_are_refused_in_one_line() -> None:
    with pytest.raises(BenchInputError, match="quick must be 1 or 0"):
        bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "maybe"})
    with pytest.raises(BenchInputError, match="sample_ms must be a positive number"):
        bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "inf"})
    with pytest.raises(BenchInputError, match="sample_ms must be at most"):
        bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "1e9"})
    with pytest.raises(BenchInputError, match="pools lists 2048 twice"):
        bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_POOLS": "2048 2048"})
    with pytest.raises(BenchInputError, match="cases lists alloc1 twice"):
        bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_CASES": "alloc1 alloc1"})
    p = bench_params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "1", "KVQUEUE_AA": ""})
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
