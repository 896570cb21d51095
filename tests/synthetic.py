"""Write fake but schema-correct raw run folders (``<raw>/<host>/<run-id>/``) for tests.

The numbers are synthetic with KNOWN truth: every variant has a fixed time factor
relative to the baseline (``factors``), so tests can check that the statistics recover
it. Noise is lognormal per sample plus a per-process level shared by all variants (it
cancels in the paired ratios, as real CPU-frequency drift would), and an optional
order effect makes later positions in a round slower.

Nothing here is real benchmark data; it never goes into ``data/raw``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.policy import policy_analysis
from kvqueue.rawdata import git_state, raw_reader

#: Typical ns per cycle by case (pool 2,048); pool 100,000 is 20 % slower.
BASE_NS = {
    "alloc1": 100.0,
    "alloc2": 150.0,
    "alloc8": 400.0,
    "alloc32": 1500.0,
    "mix": 120.0,
    "popappend": 90.0,
    "remove": 110.0,
}


def base_ns(case: str) -> float:
    """:data:`BASE_NS` of a case; ``allocN`` or ``popleftN`` of another N: 45 ns per block."""
    return BASE_NS.get(case) or 45.0 * (schema.case_size(case) or 1)


DEFAULT_VARIANTS = ("vllm==0.31.0", "vllm==0.32.0", "kvqueue", "kvqueue:floor")
DEFAULT_FACTORS = {
    "vllm==0.31.0": 1.0,
    "vllm==0.32.0": 0.8,
    "kvqueue": 0.7,
    "kvqueue:floor": 0.6,
}


def labels_for(sources: Sequence[str]) -> list[str]:
    """Labels as the runner makes them: a repeated source gets ``#2``, ``#3``, ..."""
    seen: dict[str, int] = {}
    out = []
    for src in sources:
        seen[src] = seen.get(src, 0) + 1
        out.append(src if seen[src] == 1 else f"{src}#{seen[src]}")
    return out


def write_run(
    raw_dir: Path | str,
    *,
    host: str = "synth",
    run_id: str = "20261129T100000Z-cp312-0001",
    status: str = "complete",
    started_at: str = "2026-11-29T10:00:00+00:00",
    sources: Sequence[str] = DEFAULT_VARIANTS,
    factors: Mapping[str, float] | None = None,
    processes: int = 11,
    confirm_processes: int = 9,
    samples: int = 9,
    cases: Sequence[str] = schema.CASES,
    confirm_cases: Sequence[str] = schema.CONFIRM_CASES,
    pools: Sequence[int] = schema.POOLS,
    noise: float = 0.02,
    process_noise: float = 0.05,
    order_effect: float = 0.0,
    seed: int = 1,
    noise_seed: int | None = None,
    python_version: str = "3.12.1",
    cpu_model: str = "Synthetic CPU @ 1.00GHz",
    cpu: Mapping[str, Any] | None = None,
    executable: str | None = None,
    write_samples: bool = True,
) -> Path:
    """Write one run folder and return its path.

    Parameters
    ----------
    raw_dir
        The raw-data root.
    host, run_id, status, started_at
        Run identity; ``status`` other than ``"complete"`` marks an incomplete run.
    sources
        Variant sources in order (the first is the baseline); a repeated source makes
        an A/A pair.
    factors
        True time factor per label (an A/A copy ``X#2`` defaults to ``X``'s factor).
    processes, confirm_processes, samples, cases, confirm_cases, pools
        Design of the run (``confirm_processes=0`` writes no confirmation phase).
    noise, process_noise
        Lognormal sigma per sample and per process.
    order_effect
        Relative slowdown per position step in a round (0.01 = +1 % per step).
    seed
        The run seed recorded in ``run.json`` (and the generator's seed).
    noise_seed
        Another generator seed, for runs that record the same run seed.
    python_version, cpu_model
        Environment strings.
    cpu
        ``machine.cpu`` (the CPU identity: vendor, family, model, ...); default: none
        written, as in runs recorded before it existed.
    executable
        The interpreter's path (default ``/usr/bin/python3.<minor>``).
    write_samples
        Write ``samples.csv`` (an incomplete run may have none).

    Returns
    -------
    pathlib.Path
        The run folder.
    """
    factors = dict(DEFAULT_FACTORS if factors is None else factors)
    labels = labels_for(sources)
    for lab, src in zip(labels, sources, strict=True):
        factors.setdefault(lab, factors.get(src, 1.0))
    rng = np.random.default_rng(seed if noise_seed is None else noise_seed)
    run_dir = Path(raw_dir) / host / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    minor = python_version.split(".")[1]
    executable = executable or f"/usr/bin/python3.{minor}"

    rows: list[list[object]] = []
    seeds: dict[str, list[int]] = {"main": [], "confirm": []}
    info = []
    phases = [("main", processes, cases), ("confirm", confirm_processes, confirm_cases)]
    for phase, n_proc, phase_cases in phases:
        for proc in range(1, n_proc + 1):
            pseed = int(rng.integers(1, 2**31))
            seeds[phase].append(pseed)
            info.append(
                {
                    "phase": phase,
                    "process": proc,
                    "seed": pseed,
                    "cpu": 1,
                    "pinned": True,
                    "note": "",
                    "seconds": 1.0,
                    "loops": {},
                }
            )
            level = math.exp(rng.normal(0.0, process_noise))
            for case in phase_cases:
                ops = 100 if case == "mix" else 1
                for pool in pools:
                    base = base_ns(case) * (1.2 if pool > 10_000 else 1.0)
                    loops = max(1, int(2_000_000 / (base * ops)))
                    for sample in range(samples):
                        order = rng.permutation(len(labels))
                        for pos, idx in enumerate(order):
                            lab = labels[idx]
                            ns = (
                                base
                                * factors[lab]
                                * level
                                * math.exp(rng.normal(0.0, noise))
                                * (1.0 + order_effect * pos)
                            )
                            total = max(1, round(ns * loops * ops))
                            per = total / (loops * ops)
                            row = [proc, phase, case, pool, lab, sample, pos, loops, ops]
                            rows.append([*row, total, f"{per:.4f}", 0])
    if write_samples:
        with (run_dir / "samples.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(schema.SAMPLE_COLUMNS)
            writer.writerows(rows)

    variants = []
    for lab, src in zip(labels, sources, strict=True):
        variants.append(
            {
                "label": lab,
                "source": src,
                "resolved_path": f"/cache/{src}/kv_cache_utils.py",
                "class_name": "FreeKVCacheBlockQueue",
                "vllm_version": src.split("==")[1] if "==" in src else None,
                "class_sha256": _fake_sha(src),
                "file_sha256": _fake_sha("file:" + src),
                "block_source": sources[0],
                "block_class_sha256": _fake_sha("block:" + sources[0]),
                "is_bound": src == "kvqueue:floor",
                "gate": {
                    "ok": True,
                    "ops_checked": 60000,
                    "invalid_compared": 24,
                    "seconds": 0.5,
                    "role": "baseline" if lab == labels[0] else "candidate",
                },
            }
        )
    done = status == "complete"
    meta = {
        "schema_version": schema.SCHEMA_VERSION,
        "run_id": run_id,
        "host": host,
        "status": status,
        "started_at": started_at,
        "ended_at": started_at,
        "machine": {
            "hostname": f"{host}-node",
            "cpu_model": cpu_model,
            "cpu_count": 2,
            "cpus_allowed": [0, 1],
            "kernel": "6.1.0-synthetic",
            "platform": "Linux-6.1.0-synthetic-x86_64",
            "machine": "x86_64",
            "governor": None,
            "load_avg_start": [0.1, 0.1, 0.1],
            "load_avg_end": [0.9, 0.5, 0.2],
            **({} if cpu is None else {"cpu": dict(cpu)}),
        },
        "python": {
            "executable": executable,
            "version": python_version,
            "implementation": "CPython",
            "build": "main, Jan 1 2026",
            "compiler": "GCC 12.2.0",
            "tag": f"cpython-3{minor}",
            "version_info": [int(x) for x in python_version.split(".")],
        },
        "baseline": labels[0],
        "variants": variants,
        "parameters": {
            "host": host,
            "python": executable,
            "variants": list(dict.fromkeys(sources)),
            "processes": processes,
            "confirm_processes": confirm_processes,
            "samples": samples,
            "sample_ms": 20,
            "pools": list(pools),
            "cases": list(cases),
            "confirm_cases": list(confirm_cases),
            "cpu": "auto",
            "gc": "disabled",
            "seed": seed,
            "gate_ops": 60000,
            "quick": False,
            "aa": len(set(sources)) < len(sources),
            "block_source": None,
        },
        "seeds": {"run": seed, "gate": 20261129, "case": seed, "processes": seeds},
        "project": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "processes_planned": {"main": processes, "confirm": confirm_processes},
        "processes_completed": {
            "main": processes if done else max(0, processes - 3),
            "confirm": confirm_processes if done else 0,
        },
        "process_info": info,
    }
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return run_dir


def _fake_sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(f"synthetic:{text}".encode()).hexdigest()


def write_fixture(raw_dir: Path | str, *, tiny: bool = True) -> dict[str, Path]:
    """Write a small multi-run fixture and return its run folders by role.

    Host ``synth-a`` has an older and a newer complete run (CPython 3.12) and an
    interrupted one; host ``synth-b`` has one run with an A/A pair (CPython 3.11).

    Parameters
    ----------
    raw_dir
        The raw-data root.
    tiny
        Few processes, cases and one pool (for notebook smoke tests).

    Returns
    -------
    dict
        ``older``, ``newer``, ``interrupted``, ``aa`` -> run folder.
    """
    design: dict[str, object] = (
        {
            "processes": 7,
            "confirm_processes": 6,
            "samples": 5,
            "cases": ("alloc1", "alloc2", "mix", "remove"),
            "confirm_cases": ("alloc1", "alloc2"),
            "pools": (2048,),
        }
        if tiny
        else {}
    )
    return {
        "older": write_run(
            raw_dir,
            host="synth-a",
            run_id="20261128T090000Z-cp312-aaaa",
            started_at="2026-11-28T09:00:00+00:00",
            seed=11,
            **design,  # type: ignore[arg-type]
        ),
        "newer": write_run(
            raw_dir,
            host="synth-a",
            run_id="20261129T090000Z-cp312-bbbb",
            started_at="2026-11-29T09:00:00+00:00",
            seed=12,
            **design,  # type: ignore[arg-type]
        ),
        "interrupted": write_run(
            raw_dir,
            host="synth-a",
            run_id="20261129T120000Z-cp312-cccc",
            started_at="2026-11-29T12:00:00+00:00",
            status="interrupted",
            seed=13,
            write_samples=False,
            **design,  # type: ignore[arg-type]
        ),
        "aa": write_run(
            raw_dir,
            host="synth-b",
            run_id="20261129T100000Z-cp311-dddd",
            started_at="2026-11-29T10:00:00+00:00",
            sources=("vllm==0.31.0", "vllm==0.32.0", "kvqueue", "vllm==0.32.0"),
            python_version="3.11.7",
            cpu_model="Synthetic ARM core",
            seed=14,
            **design,  # type: ignore[arg-type]
        ),
    }


#: Interpreters of :func:`write_hosts` (the versions of the committed runs).
PYTHONS = ("3.10.13", "3.11.7", "3.12.1", "3.13.0")
#: A third comparison for :func:`write_hosts` data, beside the two default pairs.
THIRD_PAIR = ("kvqueue", "vllm==0.31.0")


def write_hosts(
    raw_dir: Path | str,
    *,
    hosts: int = 4,
    pythons: Sequence[str] = PYTHONS,
    samples: int = 3,
    **design: object,
) -> list[Path]:
    """One run of the default protocol per host x interpreter: a report at full size.

    Every case on both pools, a confirmation run, an A/A pair and the lower bound, with
    labels and paths as long as real ones; only ``samples`` is small (it does not
    change the size of any table). Report on it with ``pairs`` =
    :data:`kvqueue.params.report_params.DEFAULT_PAIRS` + (:data:`THIRD_PAIR`,) for three
    comparisons.

    Parameters
    ----------
    raw_dir
        The raw-data root.
    hosts
        Number of hosts (``synth-host-1``, ...).
    pythons
        Interpreter versions; one run each per host.
    samples
        Sample rounds per process.
    design
        Further :func:`write_run` arguments.

    Returns
    -------
    list of pathlib.Path
        The run folders.
    """
    out = []
    for h in range(1, hosts + 1):
        for k, version in enumerate(pythons):
            minor = version.split(".")[1]
            out.append(
                write_run(
                    raw_dir,
                    host=f"synth-host-{h}",
                    run_id=f"20261129T1{h}{k}000Z-cp3{minor}-{h:02d}{k:02d}",
                    started_at=f"2026-11-29T1{h}:{k}0:00+00:00",
                    sources=(*DEFAULT_VARIANTS, DEFAULT_VARIANTS[0]),
                    samples=samples,
                    seed=h,  # one SEED per host, as the committed runs have
                    noise_seed=100 * h + k,
                    python_version=version,
                    cpu_model=f"Synthetic Xeon(R) Processor model {h} @ 2.10GHz",
                    executable=f"/root/.pyenv/versions/{version}/bin/python",
                    **design,  # type: ignore[arg-type]
                )
            )
    return out


def policy_runs(raw_dir: Path) -> list[dict[str, Any]]:
    """Every policy run folder under ``raw_dir`` as the policy reader reads it (altered
    ones too): ``{path, meta, rows, altered}``."""
    found = raw_reader.read_raw(raw_dir, strict=False).of_kind(schema.KIND_POLICY)
    return [policy_analysis.read_policy_run(r.path, r.meta) for r in found.runs]


def policy_table(
    raw_dir: Path, git_states: dict[str, str] | None = None, settings: Any = None
) -> pd.DataFrame:
    """The processed ``policy`` table of ``raw_dir`` as the build computes it: the one
    raw-data reader, the git rule, then the policy question's reader and analysis."""
    raw = git_state.with_git_state(raw_reader.read_raw(raw_dir, strict=False), git_states)
    runs, _ = policy_analysis.read_runs(raw.of_kind(schema.KIND_POLICY).included)
    return policy_analysis.analyze(runs, settings)
