"""Helpers shared by the timing-harness tests (test_worker, test_runner, test_bench_cli).

Everything here keeps runs tiny: two offline variants (``kvqueue`` and its check-free
``kvqueue:floor`` bound), a 64-block pool, 1–2 ms samples. Nothing here is vLLM source.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kvqueue import schema

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
GOOD_QUEUE = TESTS_DIR / "queues" / "good.py"

#: Two offline variants: the project's queue (baseline) and its floor bound.
VARIANTS = ("kvqueue", "kvqueue:floor")

#: CLI arguments of a tiny run (the validation gate still runs its full 60,000 ops).
TINY_ARGS = (
    "--precision",  # a fixed size: no second stage
    "0",
    "--variants",
    " ".join(VARIANTS),
    "--processes",
    "2",
    "--confirm-processes",
    "1",
    "--samples",
    "2",
    "--sample-ms",
    "1",
    "--pools",
    "64",
    "--cases",
    "alloc1 remove",
)


def bench_cli(
    *args: str | os.PathLike, cwd: Path = REPO_ROOT, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``python -m kvqueue bench ARGS`` in a fresh interpreter and wait for it."""
    return subprocess.run(
        [sys.executable, "-m", "kvqueue", "bench", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


#: What the broken queue lacks: ``remove`` resetting the removed block's own two links.
_REMOVE_RESETS = (
    "        block.prev_free_block = None\n"
    "        block.next_free_block = None\n"
    "        self.num_free_blocks -= 1\n"
)


def write_broken_queue(folder: Path) -> Path:
    """Write ``folder/broken_queue.py``: ``tests/queues/good.py`` with ONE deliberate bug.

    ``remove`` unlinks the block from its neighbours but leaves the block's own links
    set, so a removed block is not detached as the contract demands. The validation gate
    must refuse it, and ``make bench`` must then time nothing and write nothing. With
    the bug fixed the file is ``good.py`` again (see :func:`fixed_queue_text`).
    """
    text = GOOD_QUEUE.read_text(encoding="utf-8")
    assert text.count(_REMOVE_RESETS) == 1
    path = Path(folder) / "broken_queue.py"
    path.write_text(
        text.replace(_REMOVE_RESETS, "        self.num_free_blocks -= 1\n"), encoding="utf-8"
    )
    return path


def fixed_queue_text() -> str:
    """The broken queue with its one bug fixed: the text of ``tests/queues/good.py``."""
    return GOOD_QUEUE.read_text(encoding="utf-8")


def run_dirs(raw_dir: Path, host: str) -> list[Path]:
    """Run folders of ``host`` under ``raw_dir`` (sorted)."""
    base = Path(raw_dir) / host
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def only_run_dir(raw_dir: Path, host: str) -> Path:
    """The single run folder of ``host``; fails the test if there is not exactly one."""
    found = run_dirs(raw_dir, host)
    assert len(found) == 1, f"expected one run folder, found {found}"
    return found[0]


def tree(root: Path) -> list[str]:
    """Every path below ``root`` (relative, sorted); empty when ``root`` does not exist."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """Parse ``run.json`` of a run folder."""
    return json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))


def read_samples(run_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Parse ``samples.csv``: (header, rows with numeric columns converted)."""
    with open(Path(run_dir) / "samples.csv", newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = []
        for raw in reader:
            row: dict[str, Any] = dict(raw)
            for key in ("process", "pool", "sample", "order_position", "loops", "ops_per_loop"):
                row[key] = int(row[key])
            row["ns_total"] = int(row["ns_total"])
            row["ns_per_cycle"] = float(row["ns_per_cycle"])
            rows.append(row)
    return header, rows


def rows_per_process(rows: list[dict[str, Any]]) -> Counter:
    """Row count per (phase, process)."""
    return Counter((r["phase"], r["process"]) for r in rows)


def check_orders(rows: list[dict[str, Any]], labels: list[str], keys: tuple[str, ...]) -> list:
    """Assert each sample round (grouped by ``keys``) times every label once, positions a
    permutation of 0..V-1; return the rounds' orders (label tuples) in row order."""
    rounds: dict[tuple, dict[int, str]] = defaultdict(dict)
    for r in rows:
        key = tuple(r[k] for k in keys)
        assert r["order_position"] not in rounds[key], f"position repeated in round {key}"
        rounds[key][r["order_position"]] = r["variant"]
    orders = []
    for key, by_pos in rounds.items():
        assert sorted(by_pos) == list(range(len(labels))), f"round {key}: {sorted(by_pos)}"
        assert sorted(by_pos.values()) == sorted(labels), f"round {key}: {by_pos}"
        orders.append(tuple(by_pos[i] for i in range(len(labels))))
    return orders


def expected_rows(*, processes: int, cases: int, pools: int, variants: int, samples: int) -> int:
    """Rows one phase writes: one per (process, case, pool, variant, sample)."""
    return processes * cases * pools * variants * samples


def fake_python(path: Path, version_info: tuple[int, int, int]) -> Path:
    """Write an executable that answers ``hostinfo.python_info``'s probe like a Python
    of ``version_info`` (and nothing else); return its path."""
    version = ".".join(map(str, version_info))
    answer = json.dumps(
        {
            "executable": str(path),
            "version": version,
            "implementation": "CPython",
            "build": "fake",
            "compiler": "fake",
            "tag": f"cpython-{version_info[0]}{version_info[1]}",
            "version_info": list(version_info),
        }
    )
    path.write_text(f"#!/bin/sh\necho '{answer}'\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def run_worker(spec: dict[str, Any], python: str = sys.executable) -> subprocess.CompletedProcess:
    """Run ``python -m kvqueue.measure.timing_worker`` with ``spec`` as JSON on stdin (as the runner
    does)."""
    return subprocess.run(
        [python, "-m", "kvqueue.measure.timing_worker"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )


def sample_columns() -> list[str]:
    """``schema.SAMPLE_COLUMNS`` as a list."""
    return list(schema.SAMPLE_COLUMNS)


def make_environment(**extra: str) -> dict[str, str]:
    """The caller's environment plus ``extra``, without an outer Make's flags (under
    `make test` they would carry that call's command-line variables into ours)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return env | extra


def run_make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``make --no-print-directory ARGS`` in the repository (``env``: its whole
    environment, default :func:`make_environment`)."""
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        env=make_environment() if env is None else env,
    )
