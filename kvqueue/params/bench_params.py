"""The parameters of a bench run (``make bench``, ``make quick``; recorded in ``run.json``):
:class:`BenchParams`, their defaults and QUICK's, the value checks that start no process,
the Make variables that repeat a recorded run, and the bench notebook's ``parameters``
cell.

Every check of :func:`check_values` runs before anything is written: a bad HOST, case,
count or variant text gets a one-line :class:`BenchInputError` and leaves no trace on
disk. The checks that start processes (the interpreter is probed once, every variant
source is loaded once) are :func:`kvqueue.measure.interpreter_checks.check`'s, which returns
:class:`Checked`: the rest of the bench route passes it along instead of checking again.

Standard library only: ``python -m kvqueue`` imports this under a bare interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.params import spec
from kvqueue.params.spec import param
from kvqueue.params.value_checks import (
    MAX_POOL,
    MAX_PROCESSES,
    check_cpu,
    check_gc,
    check_host,
    check_python_given,
    no_duplicates,
    whole,
)
from kvqueue.subjects import manager_cases, pool_cases, queue_cases

DEFAULT_VARIANTS = ("vllm==0.31.0", "vllm==0.32.0", "kvqueue", "kvqueue:floor")
MAX_SAMPLES = 1000
MAX_SAMPLE_MS = 1000.0
#: Below ~0.1 ms a sample is a single loop of ~0.5 us: it times perf_counter_ns itself
#: (SAMPLE_MS=1e-9 gave 2,655 ns per cycle against ~450).
MIN_SAMPLE_MS = 0.1
#: Environment variable in which ``python -m kvqueue bench`` leaves the wall-clock time
#: (``time.time()``) at which it started: MAX_MINUTES budgets the whole command, the
#: interpreter probe, the notebook's kernel and the gate included (~25 s on a 2-vCPU VM).
BUDGET_START_ENV = "KVQUEUE_BUDGET_START"


@dataclass(frozen=True)
class BenchParams:
    """Everything that defines a bench run (recorded in ``run.json``)."""

    host: str = param("", "HOST", "label of this machine: a folder under data/raw (required)")
    python: str = param("python3", "PYTHON", "interpreter to measure (CPython 3.10 or newer)")
    variants: tuple[str, ...] = param(
        DEFAULT_VARIANTS, "VARIANTS", "variant sources, baseline first", "words"
    )
    processes: int = param(
        11, "PROCESSES", "main-phase worker processes (with PRECISION: the pilot)", "int"
    )
    precision: float = param(
        0.5,
        "PRECISION",
        "target 95% CI half-width in percentage points; the run sizes itself (0: off)",
        "float",
    )
    max_processes: int = param(
        41, "MAX_PROCESSES", "most main-phase processes the precision target may ask for", "int"
    )
    max_minutes: float = param(
        5.0, "MAX_MINUTES", "time budget of the whole run that caps the target's processes", "float"
    )
    confirm_processes: int = param(
        9, "CONFIRM_PROCESSES", "worker processes of the confirmation phase (0: none)", "int"
    )
    samples: int = param(9, "SAMPLES", "sample rounds per process and (case, pool)", "int")
    sample_ms: float = param(20.0, "SAMPLE_MS", "target length of one sample in ms", "float")
    epochs: int = param(
        1,
        "EPOCHS",
        "layout epochs per process: classes, queues, runners and padding re-made (1: once)",
        "int",
    )
    pools: tuple[int, ...] = param(schema.POOLS, "POOLS", "pool sizes in blocks", "ints")
    cases: tuple[str, ...] = param(schema.CASES, "CASES", "cases of the main phase", "words")
    confirm_cases: tuple[str, ...] = param(
        schema.CONFIRM_CASES, "CONFIRM_CASES", "cases repeated by the confirmation phase", "words"
    )
    cpu: str = param("auto", "CPU", "CPU to pin the workers to, or 'auto' (the last one)")
    gc: str = param("disabled", "GC", "garbage collector while timing: disabled | enabled")
    seed: int = param(1, "SEED", "run seed (process seeds, shuffles, case sequences)", "int")
    gate_ops: int = param(
        60_000, "GATE_OPS", "random operations per variant in the validation gate", "int"
    )
    quick: bool = param(False, "QUICK", "smoke run: small defaults (2 processes, ...)", "bool")
    aa: bool = param(False, "AA", "add an A/A copy of the baseline (the noise floor)", "bool")
    block_source: str = param(
        "", "BLOCK_SOURCE", "source of the shared KVCacheBlock class ('': the baseline's)"
    )
    block_mode: str = param(
        "shared",
        "BLOCK_MODE",
        "KVCacheBlock class: shared (one for all variants) | own (each variant's release's)",
    )
    metric: str = param(
        "time",
        "METRIC",
        "what is measured: time (wall clock, paired processes) | instructions (cachegrind)",
    )
    cache_sim: bool = param(
        False,
        "CACHE_SIM",
        "with METRIC instructions: simulate caches (L1/LL misses, estimated cycles; ~2x slower)",
        "bool",
    )
    subject: str = param(
        schema.SUBJECT_QUEUE,
        "SUBJECT",
        "what is measured: queue (FreeKVCacheBlockQueue) | pool (vLLM's BlockPool; VARIANTS "
        "are pool sources: a release, a git ref or a file, with an optional queue swap) | "
        "manager (vLLM's KVCacheManager stack; VARIANTS are manager sources: a release from "
        "0.9.0, a git ref or a checkout folder, with optional queue and pool swaps)",
    )

    @property
    def sources(self) -> list[str]:
        """Variant sources in run order; ``aa`` adds a second copy of the baseline."""
        return [*self.variants, self.variants[0]] if self.aa else list(self.variants)

    @property
    def labels(self) -> list[str]:
        """Unique variant labels (the A/A copy is ``SOURCE#2``; a pool's starts with
        :data:`kvqueue.schema.POOL_LABEL_PREFIX`)."""
        prefix = schema.SUBJECT_LABEL_PREFIX.get(self.subject, "")
        return schema.variant_labels(self.sources, prefix)

    def record(self) -> dict[str, Any]:
        """JSON-ready copy for ``run.json`` and the notebook (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


#: How a run recorded before a field existed behaved, as that field's value: a fixed
#: PROCESSES with no precision target, and one layout per process.
LEGACY_RECORD_VALUES: dict[str, Any] = {
    "precision": 0.0,
    "epochs": 1,
    "block_mode": "shared",
    "metric": "time",
    "cache_sim": False,
    "subject": schema.SUBJECT_QUEUE,
}
#: Fields that a reproduce command writes from elsewhere (host label, executable, sources).
_NOT_ASSIGNED = ("host", "python", "variants")


def make_assignments(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The Make variables that repeat a run, from its ``run.json`` ``parameters``.

    Every field is written out, defaults included, so that the command still repeats
    the run after a default changes; a field the run could not record (it did not exist
    yet) takes :data:`LEGACY_RECORD_VALUES` or is left out. ``host``, ``python`` and
    ``variants`` are left to the caller.

    Returns
    -------
    list of (str, str)
        ``(MAKE_VARIABLE, text)`` in field order; texts parse back with
        :func:`kvqueue.params.spec.parse_value` to the recorded values.
    """
    return spec.make_assignments(bench_fields(), record, _NOT_ASSIGNED, LEGACY_RECORD_VALUES)


#: What QUICK=1 changes, unless a value was given explicitly: a smoke run in seconds.
QUICK_OVERRIDES: dict[str, Any] = {
    "precision": 0.0,
    "processes": 2,
    "confirm_processes": 1,
    "samples": 3,
    "sample_ms": 5.0,
    "pools": (2048,),
}


#: Defaults of ``make quick`` (the A/B loop of :mod:`kvqueue.ab.quick_loop`): about 15 s on a
#: 2-vCPU VM for two variants and three cases, the gate (~1 s per variant) included;
#: 9 processes x 5 samples took 10 s and gave CIs of about ±1 pp on alloc1.
QUICK_LOOP_DEFAULTS: dict[str, Any] = {
    "processes": 15,
    "confirm_processes": 0,
    "samples": 7,
    "sample_ms": 10.0,
    "pools": (2048,),
    "cases": ("alloc1", "alloc2", "mix"),
    "gate_ops": 10_000,
    "precision": 0.0,
}


#: What SUBJECT=pool changes, unless a value was given explicitly: the pool's cases
#: (and, in ``make quick``, two of them: one round of vLLM's loop, one request).
POOL_OVERRIDES: dict[str, Any] = {
    "cases": schema.POOL_CASES,
    "confirm_cases": schema.POOL_CONFIRM_CASES,
}
QUICK_POOL_CASES = ("loop100", "churn")
#: What SUBJECT=manager changes, unless given: the manager's cases, and its default
#: variants: the release that took vLLM PRs #21005 and #21222, the one after, and the
#: first with the second's queue alone (the share of the saving the queue explains).
MANAGER_OVERRIDES: dict[str, Any] = {
    # One 2,048-block pool: a counted process at 100,000 blocks executed 11.9 billion
    # instructions before its first case (2.0 billion at 2,048), and its warm-up does not
    # turn the pool over, so its sweeps allocate without evicting (0.9.2's sweep10:
    # 360 k instructions per request there, 429 k at 2,048 in steady state).
    "pools": (2048,),
    "cases": schema.MANAGER_CASES,
    "confirm_cases": schema.MANAGER_CONFIRM_CASES,
    "variants": ("vllm==0.9.2", "vllm==0.10.0", "vllm==0.9.2+queue=vllm==0.10.0"),
}
QUICK_MANAGER_CASES = ("sweep10", "sweep30", "sweep100", "sweep300", "sweep1000")
QUICK_SUBJECT_CASES = {
    schema.SUBJECT_POOL: QUICK_POOL_CASES,
    schema.SUBJECT_MANAGER: QUICK_MANAGER_CASES,
}
SUBJECT_OVERRIDES = {schema.SUBJECT_POOL: POOL_OVERRIDES, schema.SUBJECT_MANAGER: MANAGER_OVERRIDES}


def bench_fields() -> list[Any]:
    """The fields of :class:`BenchParams`, in order."""
    return list(fields(BenchParams))


# ------------------------------------------------------------------ text -> value


def from_text(given: Mapping[str, str | bool | None]) -> BenchParams:
    """Build checked parameters from texts keyed by field name (``None``: not given).

    ``quick`` applies :data:`QUICK_OVERRIDES` to every field that was not given.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    return make_params(**parse_texts(given))


def parse_texts(given: Mapping[str, str | bool | None]) -> dict[str, Any]:
    """Parse texts keyed by field name into values; ``None`` (not given) is dropped.

    Raises
    ------
    BenchInputError
        An unknown name, or the first text that does not parse.
    """
    return spec.parse_texts(bench_fields(), given)


def make_params(**given: Any) -> BenchParams:
    """Build and check :class:`BenchParams` from values; missing ones take the default.

    Parameters
    ----------
    **given
        Any :class:`BenchParams` field (lists become tuples). With ``quick=True``,
        fields not given take :data:`QUICK_OVERRIDES`.

    Raises
    ------
    BenchInputError
        On the first bad value, with a one-line reason.
    """
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    if values.get("quick"):
        values = {**QUICK_OVERRIDES, **values}
    values = {**SUBJECT_OVERRIDES.get(str(values.get("subject")), {}), **values}
    try:
        params = BenchParams(**values)
    except TypeError as exc:
        raise BenchInputError(str(exc)) from None
    check_values(params)
    return params


# ------------------------------------------------------------------ checks (no processes)


def check_values(p: BenchParams) -> None:
    """Every check that needs no process: host, counts, pools, cases, variant texts.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    check_host(p.host)
    check_python_given(p.python)
    check_counts(p)
    check_cases(p)
    check_variant_texts(p)
    check_metric(p)


#: What a run can measure: wall time of paired processes, or cachegrind's instructions.
METRICS = ("time", "instructions")


def check_metric(p: BenchParams) -> None:
    """Refuse an unknown metric, and a cache simulation without instruction counts."""
    if p.metric not in METRICS:
        raise BenchInputError(f"metric must be one of {' | '.join(METRICS)}, got {p.metric!r}")
    if p.cache_sim and p.metric != "instructions":
        raise BenchInputError(
            "cache_sim needs metric instructions (it simulates cachegrind's caches)"
        )


def check_counts(p: BenchParams) -> None:
    """Refuse non-positive or absurd counts, and pools too small for the cases."""
    for name, top in (("processes", MAX_PROCESSES), ("samples", MAX_SAMPLES)):
        value = getattr(p, name)
        if not whole(value) or value < 1:
            raise BenchInputError(f"{name} must be a positive whole number, got {value!r}")
        if value > top:
            raise BenchInputError(f"{name} must be at most {top}, got {value}")
    if (
        isinstance(p.precision, bool)
        or not isinstance(p.precision, (int, float))
        or not math.isfinite(p.precision)
        or not 0 <= p.precision <= 100
    ):
        raise BenchInputError(f"precision must be 0 (off) or up to 100 pp, got {p.precision!r}")
    if not whole(p.max_processes) or not p.processes <= p.max_processes <= MAX_PROCESSES:
        raise BenchInputError(
            f"max_processes must be a whole number from processes ({p.processes}) to "
            f"{MAX_PROCESSES}, got {p.max_processes!r}"
        )
    if (
        isinstance(p.max_minutes, bool)
        or not isinstance(p.max_minutes, (int, float))
        or not math.isfinite(p.max_minutes)
        or not p.max_minutes > 0
    ):
        raise BenchInputError(f"max_minutes must be a positive number, got {p.max_minutes!r}")
    if not whole(p.epochs) or not 1 <= p.epochs <= p.samples:
        raise BenchInputError(
            f"epochs must be a whole number from 1 to samples ({p.samples}), got {p.epochs!r}"
        )
    if not whole(p.gate_ops) or p.gate_ops < 1:
        raise BenchInputError(f"gate_ops must be a positive whole number, got {p.gate_ops!r}")
    if not whole(p.confirm_processes) or p.confirm_processes < 0:
        raise BenchInputError(
            "confirm_processes must be 0 (no confirmation run) or more, "
            f"got {p.confirm_processes!r}"
        )
    if p.confirm_processes > MAX_PROCESSES:
        raise BenchInputError(
            f"confirm_processes must be at most {MAX_PROCESSES}, got {p.confirm_processes}"
        )
    if (
        isinstance(p.sample_ms, bool)
        or not isinstance(p.sample_ms, (int, float))
        or not math.isfinite(p.sample_ms)
        or not p.sample_ms > 0
    ):
        raise BenchInputError(f"sample_ms must be a positive number, got {p.sample_ms!r}")
    if p.sample_ms < MIN_SAMPLE_MS:
        raise BenchInputError(
            f"sample_ms must be at least {MIN_SAMPLE_MS:g} (below that a sample is one loop "
            f"and times the clock, not the queue), got {p.sample_ms:g}"
        )
    if p.sample_ms > MAX_SAMPLE_MS:
        raise BenchInputError(
            f"sample_ms must be at most {MAX_SAMPLE_MS:g} (a sample of {p.sample_ms:g} ms "
            "is a typo, not a protocol)"
        )
    if not p.pools:
        raise BenchInputError("pools is empty")
    for pool in p.pools:
        if not whole(pool) or pool < schema.MIN_POOL:
            raise BenchInputError(
                f"pool sizes must be whole numbers >= {schema.MIN_POOL}, got {pool!r}"
            )
        if pool > MAX_POOL:
            raise BenchInputError(f"pool sizes must be at most {MAX_POOL:,}, got {pool:,}")
    no_duplicates("pools", p.pools)
    check_cpu(p.cpu)
    check_gc(p.gc)
    if p.block_mode not in schema.BLOCK_MODES:
        raise BenchInputError(f"block_mode must be 'shared' or 'own', got {p.block_mode!r}")
    if p.block_mode == "own" and p.block_source:
        raise BenchInputError(
            "block_mode 'own' links each variant's own KVCacheBlock: give no block_source"
        )
    if not whole(p.seed):
        raise BenchInputError(f"seed must be a whole number, got {p.seed!r}")


def check_cases(p: BenchParams) -> None:
    """Refuse an unknown subject; unknown, repeated or empty case lists (the subject's
    cases: :func:`kvqueue.schema.is_case`, any N of a sized family); a pool too small
    for a case (:func:`check_pools_hold`); a block option with the pool subject (each
    ``BlockPool`` uses its own release's block class)."""
    if p.subject not in schema.SUBJECTS:
        raise BenchInputError(
            f"subject must be one of {' | '.join(schema.SUBJECTS)}, got {p.subject!r}"
        )
    for name in ("cases", "confirm_cases"):
        chosen = getattr(p, name)
        if any(not isinstance(c, str) for c in chosen):
            raise BenchInputError(f"{name} must be case names, got {list(chosen)!r}")
        problem = schema.unknown_cases(p.subject, chosen)
        if problem:
            raise BenchInputError(problem)
        no_duplicates(name, chosen)
    if not p.cases:
        raise BenchInputError("cases is empty")
    check_pools_hold(p.subject, (*p.cases, *p.confirm_cases), p.pools)
    if p.subject != schema.SUBJECT_QUEUE and (p.block_source or p.block_mode != "shared"):
        raise BenchInputError(
            f"block_source and block_mode are the queue's: a {p.subject} uses its own "
            "release's KVCacheBlock"
        )


#: Each subject's cases module: the pool each case needs (``smallest_pool``).
CASE_MODULES = {
    schema.SUBJECT_QUEUE: queue_cases,
    schema.SUBJECT_POOL: pool_cases,
    schema.SUBJECT_MANAGER: manager_cases,
}


def check_pools_hold(subject: str, cases: Sequence[str], pools: Sequence[int]) -> None:
    """Refuse, in one line naming the case, its N and the smallest pool it needs, a pool
    smaller than a case needs (``alloc500`` pops 500 blocks: not from 64).

    Raises
    ------
    BenchInputError
        The first case and pool that do not fit.
    """
    module = CASE_MODULES[subject]
    for case in dict.fromkeys(cases):
        least = module.smallest_pool(case)
        small = [pool for pool in pools if pool < least]
        if small:
            n = schema.case_size(case)
            sized = f" (N = {n:,})" if n is not None else ""
            raise BenchInputError(
                f"case {case} needs pools of at least {least:,} blocks{sized}, got {small[0]:,}"
            )


def check_variant_texts(p: BenchParams) -> None:
    """Refuse fewer than two variants, a repeated source and unprintable characters."""
    if len(p.sources) < 2:  # one variant with AA=1 is an A/A-only run (the noise floor)
        raise BenchInputError(
            "give at least two variants: a baseline and a candidate (or one with AA=1)"
        )
    no_duplicates("variants", p.variants)
    for source in (*p.variants, p.block_source):
        if any(not ch.isprintable() for ch in source):
            raise BenchInputError(f"variant source {source!r} holds a control character")
    named: dict[str, str] = {}
    for text in p.variants:
        name, source = schema.split_name(text)
        label = name or source
        if label in named:
            raise BenchInputError(
                f"two variants are both called {label!r} ({named[label]} and {source})"
            )
        named[label] = source


# ------------------------------------------------------------------ the bench notebook


@dataclass(frozen=True)
class Checked:
    """Parameters that passed every check, with what the checks learned (made by
    :func:`kvqueue.measure.interpreter_checks.check`, or rebuilt by :func:`from_notebook`).

    Attributes
    ----------
    params
        The parameters; ``params.python`` is the resolved path of the interpreter.
    python
        The interpreter's identity (:func:`kvqueue.hostinfo.python_info`), probed once.
    """

    params: BenchParams
    python: dict[str, Any]


#: The bench notebook's parameters that are not :class:`BenchParams` fields.
BENCH_NOTEBOOK_EXTRA: dict[str, tuple[str, Any, str]] = {
    "raw_dir": ("str", "data/raw", "root of the raw data (relative: to the repository root)"),
    "run_id": ("str", "", "run folder name chosen by the CLI ('': a new one)"),
    "python_info": (
        "dict",
        {},
        "the interpreter's identity as probed by the CLI ({}: check everything here)",
    ),
    "launcher_pid": ("int", 0, "pid of the CLI that runs this notebook (0: this kernel)"),
}


def bench_parameters_cell() -> str:
    """The source of ``notebooks/bench.ipynb``'s ``parameters`` cell, from the fields.

    One typed literal per line with its help as a comment, the form that
    ``papermill --help-notebook`` reads.
    """
    lines = [
        "# Parameters (papermill). Generated from kvqueue.params.bench_params.BenchParams: "
        "edit there, then `make notebooks`."
    ]
    lines += [spec.field_cell_line(f) for f in bench_fields()]
    for name, (kind, default, help_) in BENCH_NOTEBOOK_EXTRA.items():
        lines.append(spec.cell_line(name, kind, default, help_))
    return "\n".join(lines)


def bench_notebook_parameters(
    checked: Checked, raw_dir: Path, run_id: str, launcher_pid: int = 0
) -> dict[str, Any]:
    """Values for the bench notebook's ``parameters`` cell: every field, resolved."""
    return {
        **checked.params.record(),
        "raw_dir": str(raw_dir),
        "run_id": run_id,
        "python_info": checked.python,
        "launcher_pid": launcher_pid,
    }


def from_notebook(values: Mapping[str, Any]) -> Checked | BenchParams:
    """Rebuild the run's parameters from the notebook's ``parameters`` cell.

    Returns :class:`Checked` when the CLI already checked everything (it passes
    ``python_info``), else unchecked :class:`BenchParams` that the runner checks once.
    """
    by_name = {f.name: f for f in bench_fields()}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in by_name}
    # An empty list stands for a default that papermill cannot parse (see spec.cell_line).
    given = {
        k: v
        for k, v in given.items()
        if v != () or "=" not in spec.literal(spec.default_of(by_name[k]))
    }
    info = values.get("python_info") or {}
    if info:
        # Checked by the CLI: take the values as they are (QUICK was already applied).
        return Checked(BenchParams(**given), dict(info))
    # Opened by hand: a value left at its default counts as not given, so that
    # quick = True still shrinks the sizes nobody chose.
    chosen = {k: v for k, v in given.items() if v != spec.default_of(by_name[k])}
    return make_params(**chosen)
