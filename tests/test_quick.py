"""``make quick``: the gate and the paired protocol with small defaults, the comparison
printed in the terminal, nothing written under ``data/raw``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvqueue.params import bench_params

REPO_ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
TINY = ["--variants", "base=kvqueue bound=kvqueue:floor", "--processes", "6"]
TINY += ["--samples", "2", "--sample-ms", "1", "--pools", "64", "--cases", "alloc1 remove"]


def _raw_listing() -> list[str]:
    root = REPO_ROOT / "data" / "raw"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _quick(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvqueue", "quick", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_quick_prints_the_comparison_and_writes_nothing() -> None:
    before = _raw_listing()
    proc = _quick(*TINY)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("quick A/B on CPython") and "baseline base" in lines[0]
    rows = [ln for ln in lines if ln.startswith(("alloc1", "remove"))]
    assert len(rows) == 2 and all("bound" in r for r in rows)
    for r in rows:  # 1 ms samples on 64 blocks: the direction is noise, the form is not
        assert re.search(r"[+-]\d+\.\d%\s+\[[+-]\d+\.\d%, [+-]\d+\.\d%\]\s+6\s+\w", r), r
    assert len(re.findall(r"^\[ ?\d/6\] process", proc.stderr, flags=re.M)) == 6
    assert _raw_listing() == before


def test_quick_refuses_bad_input_in_one_line() -> None:
    proc = _quick(*TINY, "--processes", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "make quick: processes must be a positive whole number, got 0"


def test_quick_defaults_are_small_and_exist_as_fields() -> None:
    names = {f.name for f in bench_params.bench_fields()}
    assert set(bench_params.QUICK_LOOP_DEFAULTS) <= names
    p = bench_params.make_params(host="quick", **bench_params.QUICK_LOOP_DEFAULTS)
    assert p.confirm_processes == 0 and len(p.pools) == 1


@pytest.mark.skipif(not (REPO_ROOT / ".venv").is_dir(), reason="no .venv")
def test_make_quick_passes_variables_verbatim() -> None:
    proc = subprocess.run(
        ["make", "--no-print-directory", "quick", "VARIANTS=base=kvqueue x`true`=kvqueue"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "make quick: variant 'x`true`=kvqueue'" in proc.stderr, proc.stderr
