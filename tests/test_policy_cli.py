"""`make policy` / `python -m kvqueue policy`: parameters agree with the Makefile and
the CLI, bad input is one line with nothing written, and (slow) a tiny run end to end:
the run folder, its seal, and the processed policy table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvqueue import __main__ as cli
from kvqueue import params, policy_report, policy_run

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--pool", "1024", "--concurrency", "8", "--prefill-median", "16", "--prefill-max", "96",
    "--decode-median", "4", "--decode-max", "32", "--decode-every", "2", "--families", "4",
    "--warmup-steps", "150", "--steps", "150", "--processes", "6", "--variant", "kvqueue",
    "--windows", "1 inf",
]  # fmt: skip


def _subparser(name: str):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[name]


def test_makefile_policy_variables_are_the_fields() -> None:
    text = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^POLICY_VARS := ((?:.*\\\n)*.*)$", text, flags=re.M)
    assert match, "Makefile has no POLICY_VARS list"
    listed = match.group(1).replace("\\\n", " ").split()
    assert listed == [params.spec_of(f).make for f in params.policy_fields()]


def test_cli_options_are_the_policy_fields() -> None:
    options = {a.dest for a in _subparser("policy")._actions if a.option_strings} - {"help"}
    assert options == {f.name for f in params.policy_fields()} | {"raw_dir", "from_env"}


def test_policy_help_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["policy", "--help"])
    assert info.value.code == 0
    assert "WINDOWS" in capsys.readouterr().out


def test_policies_follow_the_windows() -> None:
    p = params.policy_from_text({"host": "h", "windows": "2 inf"})
    assert p.policies == ["lru", "contig-w2", "contig-inf"]
    assert p.workload()["pool"] == 16_384


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({}, "HOST is missing"),
        ({"windows": "0"}, "WINDOWS takes whole numbers"),
        ({"windows": "2 2"}, "windows lists 2 twice"),
        ({"threshold": "x"}, "must be a whole number"),
        ({"pool": "100"}, "workload: prefill_max + decode_max"),
        ({"prefix_share": "1.5"}, "prefix_share"),
        ({"nonsense": "1"}, "unknown parameter"),
    ],
)
def test_bad_policy_input_is_one_line(given: dict, words: str) -> None:
    given = given if words.startswith("HOST") else {"host": "h", **given}
    with pytest.raises(params.BenchInputError, match=re.escape(words)):
        params.policy_from_text(given)


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    raw = tmp_path / "raw"
    code = cli.main(["policy", "--host", "h", "--windows", "0", "--raw-dir", str(raw)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("make policy: ")
    assert not raw.exists()


@pytest.mark.slow
def test_a_tiny_policy_run_end_to_end(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "policy", "--host", "tiny", "--raw-dir", str(raw),
         "--python", sys.executable, *TINY],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (raw / "tiny").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["kind"] == "policy" and meta["status"] == "complete"
    assert meta["workload"]["pool"] == 1024 and meta["seeds"]["run"] == 1
    assert meta["variants"][0]["check"]["ok"]
    assert meta["processes_completed"]["main"] == 6
    runs = policy_report.read_policy_runs(raw)
    assert len(runs) == 1 and runs[0]["altered"] is None
    assert len(runs[0]["rows"]) == 6 * 3
    table = policy_report.analyze(raw)
    assert set(table["policy"]) == {"lru", "contig-w1", "contig-inf"}
    lru = table[(table["policy"] == "lru") & (table["metric"] == "passed_over")]
    assert float(lru["estimate"].iloc[0]) == 0.0  # lru never passes over an older block
    red = table[(table["policy"] == "contig-inf") & (table["metric"] == "runs_reduction")]
    assert float(red["estimate"].iloc[0]) > 1.0
    # An edited policy.csv is left out (altered), never read into the table.
    csv_path = run_dir / policy_run.POLICY_CSV
    csv_path.write_text(csv_path.read_text().replace(",lru,", ",lru,", 1) + "\n")
    assert policy_report.read_policy_runs(raw)[0]["altered"]
    assert policy_report.analyze(raw).empty
