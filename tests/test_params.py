"""One source for every parameter: the fields of ``kvqueue.params`` against the Makefile,
the CLI options and the notebooks' ``parameters`` cells; and the module graph of the
package (no cycles, none dodged by an import inside a function).
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from kvqueue import __main__ as cli
from kvqueue import params
from kvqueue.bench import notebook

REPO_ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = REPO_ROOT / "Makefile"
PACKAGE = REPO_ROOT / "kvqueue"


def _bench_make_names() -> list[str]:
    return [params.spec_of(f).make for f in params.bench_fields()]


def _subparser(name: str):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[name]


# ------------------------------------------------------------------ agreement


def test_makefile_variables_are_the_fields() -> None:
    text = MAKEFILE.read_text(encoding="utf-8")
    match = re.search(r"^BENCH_VARS := ((?:.*\\\n)*.*)$", text, flags=re.M)
    assert match, "Makefile has no BENCH_VARS list"
    listed = match.group(1).replace("\\\n", " ").split()
    assert listed == _bench_make_names()
    declared = re.findall(r"^([A-Z_]+)\s*\?=", text, flags=re.M)
    assert set(_bench_make_names()) <= set(declared), "a bench variable has no `?=` default"


def test_cli_options_are_the_fields() -> None:
    bench = _subparser("bench")
    options = {a.dest for a in bench._actions if a.option_strings} - {"help"}
    assert options == {f.name for f in params.bench_fields()} | {
        "raw_dir",
        "no_notebook",
        "from_env",
    }
    report = _subparser("report")
    options = {a.dest for a in report._actions if a.option_strings} - {"help"}
    settings = {f.name for f in fields(params.ReportSettings)}
    assert options == settings | {"raw_dir", "processed_dir", "out", "notebook"}


@pytest.mark.parametrize("path", sorted(notebook.expected_parameters_cells()), ids=str)
def test_notebook_parameters_cells_are_generated_from_the_fields(path: Path) -> None:
    expected = notebook.expected_parameters_cells()[path]
    assert notebook.parameters_cell_source(path) == expected, (
        f"{path.name}'s parameters cell differs from kvqueue.params: run `make notebooks`"
    )


def test_bench_notebook_parameter_names_are_the_fields() -> None:
    source = notebook.parameters_cell_source(notebook.BENCH_NOTEBOOK)
    names = [s.target.id for s in ast.parse(source).body if isinstance(s, ast.AnnAssign)]
    assert names == [f.name for f in params.bench_fields()] + list(params.BENCH_NOTEBOOK_EXTRA)


def test_papermill_help_shows_types_and_help() -> None:
    papermill = pytest.importorskip("papermill")
    found = papermill.inspect_notebook(str(notebook.BENCH_NOTEBOOK))
    assert found["processes"]["inferred_type_name"] == "int"
    assert found["processes"]["help"] == "main-phase worker processes (with PRECISION: the pilot)"
    assert found["variants"]["inferred_type_name"] == "list[str]"


def test_notebook_values_round_trip_through_the_parameters() -> None:
    p = params.make_params(host="grace", python="python3", quick=True, cases=["alloc1"])
    checked = params.Checked(p, {"tag": "cpython-311"})
    values = params.bench_notebook_parameters(checked, Path("/raw"), "rid")
    back = params.from_notebook(values)
    assert isinstance(back, params.Checked) and back.params == p
    # Opened by hand (no python_info): defaults count as not given, so quick applies.
    values = {f.name: params.default_of(f) for f in params.bench_fields()}
    values |= {"host": "grace", "quick": True, "python_info": {}}
    back = params.from_notebook(values)
    assert isinstance(back, params.BenchParams) and back.processes == 2


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
    with pytest.raises(params.BenchInputError, match="quick must be 1 or 0"):
        params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "maybe"})
    with pytest.raises(params.BenchInputError, match="sample_ms must be a positive number"):
        params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "inf"})
    with pytest.raises(params.BenchInputError, match="sample_ms must be at most"):
        params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_SAMPLE_MS": "1e9"})
    with pytest.raises(params.BenchInputError, match="pools lists 2048 twice"):
        params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_POOLS": "2048 2048"})
    with pytest.raises(params.BenchInputError, match="cases lists alloc1 twice"):
        params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_CASES": "alloc1 alloc1"})
    p = params.from_environment({"KVQUEUE_HOST": "h", "KVQUEUE_QUICK": "1", "KVQUEUE_AA": ""})
    assert p.quick and not p.aa and p.processes == params.QUICK_OVERRIDES["processes"]


def test_two_variants_with_one_name_are_refused() -> None:
    with pytest.raises(params.BenchInputError, match="two variants are both called 'x'"):
        params.make_params(host="h", variants=["x=kvqueue", "x=kvqueue:floor"])
    p = params.make_params(host="h", variants=["base=kvqueue", "bound=kvqueue:floor"], aa=True)
    assert p.labels == ["base", "bound", "base#2"]


def test_one_variant_with_aa_is_an_aa_only_run() -> None:
    p = params.make_params(host="h", variants=["kvqueue"], aa=True)
    assert p.sources == ["kvqueue", "kvqueue"] and p.labels == ["kvqueue", "kvqueue#2"]
    with pytest.raises(params.BenchInputError, match="at least two variants"):
        params.make_params(host="h", variants=["kvqueue"])


@pytest.mark.parametrize("command", ["", "validate", "bench", "quick", "report", "sync-notebooks"])
def test_every_help_prints(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help texts with %: a bare % in one crashed `report --help`."""
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0
    assert "usage: python -m kvqueue" in capsys.readouterr().out
