"""Integrity checks of a complete raw run: its files against the digests its ``run.json``
records, and its samples against its own plan.

Used by :mod:`kvqueue.rawdata.raw_reader` when it reads a run: a run that fails either
check comes back *altered* (:data:`ALTERED` + the reason), named in the report but out
of every statistic.

- digests (:func:`check_digests`, :func:`read_recorded_files`): the sha256 and row
  count of ``samples.csv``, the sha256 of ``bench.ipynb`` when one is recorded, every
  file a non-bench run records (schema 2 on, see :mod:`kvqueue.measure.run_folder`);
- the plan (:func:`plan_problem`): processes x phases x cases x pools x variants x
  samples, no gaps, nothing extra, each round's order positions a permutation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd

from kvqueue import schema

#: :attr:`Run.integrity` of a run whose files match the digests its ``run.json`` records.
SEALED = "sealed"
#: ... of such a run whose ``bench.ipynb`` has no recorded digest (noted, not held
#: against the run: the notebook is the run's record, not its data).
SEALED_NOTEBOOK_UNSEALED = "sealed (notebook not sealed)"
#: ... of a schema-1 run (recorded no digests; only the plan checks apply).
UNSEALED_V1 = "unsealed (schema 1)"
#: ... of a schema-2 ``run.json`` without ``files`` (the runner always writes it, so this
#: is a hand-made or stripped record; only the plan checks apply).
UNSEALED_NO_DIGESTS = "unsealed (run.json records no digests)"
#: Prefix of :attr:`Run.integrity` of an altered run (the reason follows).
ALTERED = "altered: "


def check_digests(
    run_dir: Path, meta: dict[str, Any], samples_sha256: str
) -> tuple[str, str | None]:
    """``(integrity, problem)``: a bench-format run's files against the digests that
    its ``run.json`` records (``problem`` is ``None`` when they match)."""
    files = meta.get(schema.FILES_KEY)
    if files is None:
        return (UNSEALED_V1 if meta["schema_version"] < 2 else UNSEALED_NO_DIGESTS), None
    sealed = files.get(schema.SAMPLES_CSV)
    if sealed is None:
        return SEALED, "run.json records no digest of samples.csv"
    if sealed["sha256"] != samples_sha256:
        return SEALED, "samples.csv sha256 differs from run.json (edited after the run)"
    notebook = run_dir / schema.RUN_NOTEBOOK
    nb_sealed = files.get(schema.RUN_NOTEBOOK)
    if nb_sealed is None:
        return (SEALED_NOTEBOOK_UNSEALED if notebook.is_file() else SEALED), None
    if not notebook.is_file():
        return SEALED, "bench.ipynb is missing, run.json records its sha256"
    if hashlib.sha256(notebook.read_bytes()).hexdigest() != nb_sealed["sha256"]:
        return SEALED, "bench.ipynb sha256 differs from run.json (edited after the run)"
    return SEALED, None


def read_recorded_files(run_dir: Path, meta: dict[str, Any]) -> tuple[dict[str, bytes], str | None]:
    """Read every file a non-bench run records, once, and check it against its sha256.

    Returns ``(files, None)``: the bytes of each recorded file keyed by its name, as read
    and checked; or ``({}, why)`` naming the first file that is missing or differs from
    its recorded sha256 (nothing of such a run may be parsed). The run's own module
    parses the bytes (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`): no file is read
    or hashed a second time.

    A complete run of such a kind must record its files: without digests nothing could
    tell its data from an edited copy.
    """
    files = meta.get(schema.FILES_KEY)
    if not files:
        return {}, "run.json records no digests of its files"
    out: dict[str, bytes] = {}
    for name, entry in sorted(files.items()):
        target = run_dir / name
        if Path(name).name != name or not target.is_file():
            return {}, f"{name} is missing, run.json records its sha256"
        data = target.read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            return {}, f"{name} sha256 differs from run.json (edited after the run)"
        out[name] = data
    return out, None


# ---------------------------------------------------------------------------------------
# the run's plan


def planned_cases(meta: dict[str, Any], phase: str) -> list[str]:
    """The cases that one process of ``phase`` timed, by the run's own parameters.

    ``main`` times ``parameters.cases``. ``confirm`` times ``parameters.confirm_cases`` as
    recorded from schema 2 on (the runner records the effective list); a schema-1 run
    recorded the list as given, so the rule of :func:`kvqueue.measure.runner.phase_cases` is
    replayed: the confirmation cases that the run measured, or all of them when it
    measured none (a missing list is the default :data:`kvqueue.schema.CONFIRM_CASES`).
    """
    params = meta["parameters"]
    cases = list(params["cases"])
    if phase == "main":
        return cases
    confirm = params.get("confirm_cases")
    confirm = list(schema.CONFIRM_CASES if confirm is None else confirm)
    if meta["schema_version"] >= 2:
        return confirm
    return [c for c in confirm if c in cases] or confirm


def _numbers(values: Any) -> str:
    """``1-8, 12``: sorted whole numbers as ranges."""
    runs: list[list[int]] = []
    for n in sorted({int(v) for v in values}):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def plan_problem(meta: dict[str, Any], samples: pd.DataFrame) -> str | None:
    """How a complete run's samples disagree with its own plan, or ``None``.

    The plan: for each phase, processes ``1..processes_completed[phase]`` (which must
    equal ``processes_planned[phase]``, the run being complete), each timing every case
    of :func:`planned_cases` x every pool of ``parameters.pools`` x every variant x
    samples ``0..parameters.samples - 1``, once; in each sample round the variants take
    the order positions ``0..n_variants - 1`` once each.

    Parameters
    ----------
    meta
        The run's checked ``run.json``.
    samples
        Its checked samples (:func:`read_samples`: known phases, cases and variants, no
        duplicate sample).

    Returns
    -------
    str or None
        One line naming the first disagreement.
    """
    params = meta["parameters"]
    labels = [v["label"] for v in meta["variants"]]
    pools = set(params["pools"])
    n_samples = int(params["samples"])
    planned, completed = meta["processes_planned"], meta["processes_completed"]
    for phase in schema.PHASES:
        want, done = planned.get(phase) or 0, completed.get(phase) or 0
        if done != want:
            return (
                f"status complete, but run.json counts {done} of {want} planned "
                f"{phase} processes as completed"
            )
    for phase in schema.PHASES:
        rows = samples[samples["phase"] == phase]
        done = completed.get(phase) or 0
        have = set(rows["process"].unique().tolist())
        if have != set(range(1, done + 1)):
            return (
                f"samples.csv has {len(have)} {phase} process(es) ({_numbers(have)}), "
                f"run.json counts {done} completed"
            )
        if not done:
            continue
        cases = planned_cases(meta, phase)
        for col, allowed, what in (
            ("case", set(cases), f"a case that its plan does not time ({' '.join(cases)})"),
            (
                "pool",
                pools,
                f"a pool not in parameters.pools ({' '.join(map(str, sorted(pools)))})",
            ),
            ("sample", set(range(n_samples)), f"a sample outside 0-{n_samples - 1}"),
        ):
            bad = rows[~rows[col].isin(allowed)]
            if len(bad):
                return f"samples.csv has {phase} rows with {what}: {col} {bad[col].iloc[0]}"
        expected = done * len(set(cases)) * len(pools) * len(labels) * n_samples
        if len(rows) != expected:
            # No duplicates and nothing outside the plan: fewer rows means gaps.
            per = rows.groupby("process").size()
            short = per[per < expected // done]
            first = f" (first incomplete: process {int(short.index[0])})" if len(short) else ""
            return (
                f"samples.csv lacks {expected - len(rows):,} of the {expected:,} {phase} samples "
                f"of the run's plan ({done} processes x {len(set(cases))} cases x "
                f"{len(pools)} pools x {len(labels)} variants x {n_samples} samples){first}"
            )
    rounds = ["phase", "process", "case", "pool", "sample"]
    bad = samples["order_position"] >= len(labels)
    bad |= samples.duplicated([*rounds, "order_position"], keep=False)
    if bad.any():
        row = samples[bad].iloc[0]
        return (
            f"samples.csv: order positions of the round {row['phase']} process "
            f"{row['process']}, {row['case']}, pool {row['pool']}, sample {row['sample']} "
            f"are not a permutation of 0-{len(labels) - 1}"
        )
    return None
