"""Parameters of every command, their defaults, their help and the checks that refuse bad
input: the one source that the CLI options, the Make variables and the notebooks'
``parameters`` cells are generated from (``tests/test_params.py`` checks that they agree).

:class:`BenchParams` defines a bench run, :class:`ReportSettings` the analysis. Each
field carries its Make variable, its help and how its text is parsed (:class:`Spec`).
Every check of :func:`check_values` runs before anything is written: a bad HOST, case,
count, interpreter or variant source gets a one-line :class:`BenchInputError` and leaves
no trace on disk. :func:`check` adds the checks that start processes (the interpreter is
probed once, every variant source is loaded once) and returns :class:`Checked`, which
the rest of the bench route passes along instead of checking again.

Standard library only: ``python -m kvqueue`` imports this under a bare interpreter.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchInputError
from kvqueue.sources import loader
from kvqueue.subject import cases

DEFAULT_VARIANTS = ("vllm==0.31.0", "vllm==0.32.0", "kvqueue", "kvqueue:floor")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MIN_POOL = 64  # alloc32 pops 32 blocks; remove needs interior blocks
MIN_PYTHON = (3, 10)
#: Upper bounds that catch a typo (SAMPLE_MS=20000 for 20) before hours are spent: the
#: default run takes ~200 s; these allow runs ~100x longer than that, no more.
MAX_PROCESSES = 1000
MAX_SAMPLES = 1000
MAX_SAMPLE_MS = 1000.0
#: Below ~0.1 ms a sample is a single loop of ~0.5 us: it times perf_counter_ns itself
#: (SAMPLE_MS=1e-9 gave 2,655 ns per cycle against ~450).
MIN_SAMPLE_MS = 0.1
MAX_POOL = 10_000_000
#: Prefix of the environment variables through which ``make`` hands its variables to
#: ``python -m kvqueue ... --from-env``: values travel verbatim, never through a shell.
ENV_PREFIX = "KVQUEUE_"
#: Environment variable in which ``python -m kvqueue bench`` leaves the wall-clock time
#: (``time.time()``) at which it started: MAX_MINUTES budgets the whole command, the
#: interpreter probe, the notebook's kernel and the gate included (~25 s on a 2-vCPU VM).
BUDGET_START_ENV = "KVQUEUE_BUDGET_START"
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("", "0", "no", "false", "off")


@dataclass(frozen=True)
class Spec:
    """How one parameter is named outside Python and how its text is read.

    Attributes
    ----------
    make
        The Make variable (and, with :data:`ENV_PREFIX`, the environment variable).
    help
        One line for ``--help``, ``make help`` and the notebook's ``parameters`` cell.
    kind
        ``str``, ``int``, ``float``, ``bool``, ``words`` (space-separated strings) or
        ``ints`` (space-separated whole numbers).
    """

    make: str
    help: str
    kind: str = "str"


def _param(default: Any, make: str, help: str, kind: str = "str") -> Any:
    return field(default=default, metadata={"spec": Spec(make, help, kind)})


def spec_of(f: Any) -> Spec:
    """The :class:`Spec` of a dataclass field of :class:`BenchParams`."""
    return f.metadata["spec"]


@dataclass(frozen=True)
class BenchParams:
    """Everything that defines a bench run (recorded in ``run.json``)."""

    host: str = _param("", "HOST", "label of this machine: a folder under data/raw (required)")
    python: str = _param("python3", "PYTHON", "interpreter to measure (CPython 3.10 or newer)")
    variants: tuple[str, ...] = _param(
        DEFAULT_VARIANTS, "VARIANTS", "variant sources, baseline first", "words"
    )
    processes: int = _param(
        11, "PROCESSES", "main-phase worker processes (with PRECISION: the pilot)", "int"
    )
    precision: float = _param(
        0.5,
        "PRECISION",
        "target 95% CI half-width in percentage points; the run sizes itself (0: off)",
        "float",
    )
    max_processes: int = _param(
        41, "MAX_PROCESSES", "most main-phase processes the precision target may ask for", "int"
    )
    max_minutes: float = _param(
        5.0, "MAX_MINUTES", "time budget of the whole run that caps the target's processes", "float"
    )
    confirm_processes: int = _param(
        9, "CONFIRM_PROCESSES", "worker processes of the confirmation phase (0: none)", "int"
    )
    samples: int = _param(9, "SAMPLES", "sample rounds per process and (case, pool)", "int")
    sample_ms: float = _param(20.0, "SAMPLE_MS", "target length of one sample in ms", "float")
    epochs: int = _param(
        1,
        "EPOCHS",
        "layout epochs per process: classes, queues, runners and padding re-made (1: once)",
        "int",
    )
    pools: tuple[int, ...] = _param(schema.POOLS, "POOLS", "pool sizes in blocks", "ints")
    cases: tuple[str, ...] = _param(schema.CASES, "CASES", "cases of the main phase", "words")
    confirm_cases: tuple[str, ...] = _param(
        schema.CONFIRM_CASES, "CONFIRM_CASES", "cases repeated by the confirmation phase", "words"
    )
    cpu: str = _param("auto", "CPU", "CPU to pin the workers to, or 'auto' (the last one)")
    gc: str = _param("disabled", "GC", "garbage collector while timing: disabled | enabled")
    seed: int = _param(1, "SEED", "run seed (process seeds, shuffles, case sequences)", "int")
    gate_ops: int = _param(
        60_000, "GATE_OPS", "random operations per variant in the validation gate", "int"
    )
    quick: bool = _param(False, "QUICK", "smoke run: small defaults (2 processes, ...)", "bool")
    aa: bool = _param(False, "AA", "add an A/A copy of the baseline (the noise floor)", "bool")
    block_source: str = _param(
        "", "BLOCK_SOURCE", "source of the shared KVCacheBlock class ('': the baseline's)"
    )
    block_mode: str = _param(
        "shared",
        "BLOCK_MODE",
        "KVCacheBlock class: shared (one for all variants) | own (each variant's release's)",
    )

    @property
    def sources(self) -> list[str]:
        """Variant sources in run order; ``aa`` adds a second copy of the baseline."""
        return [*self.variants, self.variants[0]] if self.aa else list(self.variants)

    @property
    def labels(self) -> list[str]:
        """Unique variant labels (the A/A copy is ``SOURCE#2``)."""
        return loader.variant_labels(self.sources)

    def record(self) -> dict[str, Any]:
        """JSON-ready copy for ``run.json`` and the notebook (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


#: How a run recorded before a field existed behaved, as that field's value: a fixed
#: PROCESSES with no precision target, and one layout per process.
LEGACY_RECORD_VALUES: dict[str, Any] = {"precision": 0.0, "epochs": 1, "block_mode": "shared"}
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
        :func:`parse_value` to the recorded values.
    """
    out = []
    for f in bench_fields():
        if f.name in _NOT_ASSIGNED:
            continue
        value = record.get(f.name, LEGACY_RECORD_VALUES.get(f.name))
        if value is None or value == "":
            continue  # empty means the default, which is what the run used
        if isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, list | tuple):
            text = " ".join(str(v) for v in value)
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = str(value)
        out.append((spec_of(f).make, text))
    return out


#: What QUICK=1 changes, unless a value was given explicitly: a smoke run in seconds.
QUICK_OVERRIDES: dict[str, Any] = {
    "precision": 0.0,
    "processes": 2,
    "confirm_processes": 1,
    "samples": 3,
    "sample_ms": 5.0,
    "pools": (2048,),
}


#: Defaults of ``make quick`` (the A/B loop of :mod:`kvqueue.bench.quick`): about 15 s on a
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


def bench_fields() -> list[Any]:
    """The fields of :class:`BenchParams`, in order."""
    return list(fields(BenchParams))


def default_of(f: Any) -> Any:
    """The default value of a dataclass field."""
    return f.default if f.default is not MISSING else f.default_factory()


# ------------------------------------------------------------------ text -> value


def parse_value(name: str, spec: Spec, text: str | bool) -> Any:
    """Turn the text of one parameter (CLI or environment) into its value.

    Raises
    ------
    BenchInputError
        With a one-line reason naming the parameter.
    """
    if spec.kind == "bool":
        if isinstance(text, bool):
            return text
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise BenchInputError(f"{name} must be 1 or 0 (yes/no), got {text!r}")
    assert isinstance(text, str)
    if spec.kind == "words":
        return tuple(text.split())
    if spec.kind == "ints":
        try:
            return tuple(int(x) for x in text.split())
        except ValueError:
            raise BenchInputError(f"{name} must be whole numbers, got {text!r}") from None
    if spec.kind == "int":
        try:
            return int(text)
        except ValueError:
            raise BenchInputError(f"{name} must be a whole number, got {text!r}") from None
    if spec.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise BenchInputError(f"{name} must be a number, got {text!r}") from None
    return text


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
    specs = {f.name: spec_of(f) for f in bench_fields()}
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise BenchInputError(f"unknown parameter(s): {', '.join(unknown)}")
    return {k: parse_value(k, specs[k], v) for k, v in given.items() if v is not None}


def environment_texts(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The text of every field from ``KVQUEUE_<MAKE VARIABLE>``; empty or unset: ``None``.

    This is how ``make`` passes its variables: verbatim, so that no value is ever
    evaluated by a shell. An empty variable means "the default" (so QUICK's defaults
    still apply to it).
    """
    out: dict[str, str | None] = {}
    for f in bench_fields():
        text = environ.get(ENV_PREFIX + spec_of(f).make, "")
        out[f.name] = text if text.strip() else None
    return out


def from_environment(environ: Mapping[str, str]) -> BenchParams:
    """Build checked parameters from ``KVQUEUE_<MAKE VARIABLE>`` environment variables."""
    return from_text(environment_texts(environ))


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
    if not p.python:
        raise BenchInputError("PYTHON is empty: give the interpreter to measure")
    check_counts(p)
    check_cases(p)
    check_variant_texts(p)


def check_host(host: str | None) -> None:
    """Refuse a missing, empty, path-like or space-containing host label."""
    if not host:
        raise BenchInputError("HOST is missing: give a label for this machine, e.g. HOST=grace")
    if ".." in host or "/" in host or not _HOST_RE.match(host):
        raise BenchInputError(
            f"HOST {host!r} is not a valid label: start with a letter or digit, then use "
            "letters, digits, '.', '_' or '-' (no '/', '..' or spaces; at most 64 characters)"
        )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_counts(p: BenchParams) -> None:
    """Refuse non-positive or absurd counts, and pools too small for the cases."""
    for name, top in (("processes", MAX_PROCESSES), ("samples", MAX_SAMPLES)):
        value = getattr(p, name)
        if not _whole(value) or value < 1:
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
    if not _whole(p.max_processes) or not p.processes <= p.max_processes <= MAX_PROCESSES:
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
    if not _whole(p.epochs) or not 1 <= p.epochs <= p.samples:
        raise BenchInputError(
            f"epochs must be a whole number from 1 to samples ({p.samples}), got {p.epochs!r}"
        )
    if not _whole(p.gate_ops) or p.gate_ops < 1:
        raise BenchInputError(f"gate_ops must be a positive whole number, got {p.gate_ops!r}")
    if not _whole(p.confirm_processes) or p.confirm_processes < 0:
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
        if not _whole(pool) or pool < MIN_POOL:
            raise BenchInputError(f"pool sizes must be whole numbers >= {MIN_POOL}, got {pool!r}")
        if pool > MAX_POOL:
            raise BenchInputError(f"pool sizes must be at most {MAX_POOL:,}, got {pool:,}")
    _no_duplicates("pools", p.pools)
    if p.cpu != "auto":
        if not str(p.cpu).isdigit():
            raise BenchInputError(f"cpu must be 'auto' or a CPU number, got {p.cpu!r}")
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None and int(p.cpu) not in allowed:
            raise BenchInputError(f"CPU {p.cpu} is not available here (allowed: {allowed})")
    if p.gc not in ("disabled", "enabled"):
        raise BenchInputError(f"gc must be 'disabled' or 'enabled', got {p.gc!r}")
    if p.block_mode not in loader.BLOCK_MODES:
        raise BenchInputError(f"block_mode must be 'shared' or 'own', got {p.block_mode!r}")
    if p.block_mode == "own" and p.block_source:
        raise BenchInputError(
            "block_mode 'own' links each variant's own KVCacheBlock: give no block_source"
        )
    if not _whole(p.seed):
        raise BenchInputError(f"seed must be a whole number, got {p.seed!r}")


def _no_duplicates(name: str, values: Iterable[Any]) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            # Two equal sample keys would make the run unreadable for the report.
            raise BenchInputError(f"{name} lists {value} twice")
        seen.add(value)


def check_cases(p: BenchParams) -> None:
    """Refuse unknown, repeated or empty case lists."""
    for name in ("cases", "confirm_cases"):
        chosen = getattr(p, name)
        unknown = [c for c in chosen if c not in schema.CASES]
        if unknown:
            raise BenchInputError(
                f"unknown case(s) {', '.join(unknown)}: choose from {' '.join(schema.CASES)}"
            )
        _no_duplicates(name, chosen)
    if not p.cases:
        raise BenchInputError("cases is empty")


def check_variant_texts(p: BenchParams) -> None:
    """Refuse fewer than two variants, a repeated source and unprintable characters."""
    if len(p.sources) < 2:  # one variant with AA=1 is an A/A-only run (the noise floor)
        raise BenchInputError(
            "give at least two variants: a baseline and a candidate (or one with AA=1)"
        )
    _no_duplicates("variants", p.variants)
    for source in (*p.variants, p.block_source):
        if any(not ch.isprintable() for ch in source):
            raise BenchInputError(f"variant source {source!r} holds a control character")
    named: dict[str, str] = {}
    for text in p.variants:
        name, source = loader.split_name(text)
        label = name or source
        if label in named:
            raise BenchInputError(
                f"two variants are both called {label!r} ({named[label]} and {source})"
            )
        named[label] = source


# ------------------------------------------------------------------ checks (processes)


@dataclass(frozen=True)
class Checked:
    """Parameters that passed every check, with what the checks learned.

    Attributes
    ----------
    params
        The parameters; ``params.python`` is the resolved path of the interpreter.
    python
        The interpreter's identity (:func:`kvqueue.hostinfo.python_info`), probed once.
    """

    params: BenchParams
    python: dict[str, Any]


def check(p: BenchParams) -> Checked:
    """Run every check of a bench run once: values, interpreter, variant sources.

    Raises
    ------
    BenchInputError
        On the first problem, before anything is written.
    """
    check_values(p)
    path, info = check_python(p.python)
    p = replace(p, python=path)
    check_sources(p)
    return Checked(p, info)


def check_python(python: str) -> tuple[str, dict[str, Any]]:
    """Return the interpreter's path and identity if it exists, runs and is >= 3.10.

    A bare name (``python3``) is looked up on ``PATH`` like a shell would. The
    interpreter is started once here; everything later uses the returned identity.
    """
    found = shutil.which(python) if os.sep not in python else python
    if not found or not Path(found).exists():
        raise BenchInputError(f"PYTHON '{python}' does not exist")
    try:
        info = hostinfo.python_info(found)
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"PYTHON '{found}' does not run: {exc}") from None
    if tuple(info["version_info"][:2]) < MIN_PYTHON:
        raise BenchInputError(
            f"PYTHON '{found}' is {info['version']}; the worker needs Python >= 3.10"
        )
    optimize = (info.get("flags") or {}).get("optimize", 0)
    if optimize:
        raise BenchInputError(
            f"PYTHON '{found}' runs with -O (sys.flags.optimize={optimize}; PYTHONOPTIMIZE or "
            "a wrapper?): it strips every assert of the gate and the queues, so nothing "
            "would be measured as written"
        )
    return found, info


def check_sources(p: BenchParams) -> None:
    """Resolve and load every variant (fetching releases into the cache) or refuse.

    Loading (not just reading) catches a class that lacks a queue method up front.
    """
    for source in p.variants:
        try:
            if p.block_mode == "own":
                (variant,) = loader.load_variants([source], block_mode="own")
            else:
                block = p.block_source or p.variants[0]
                (variant,) = loader.load_variants([source], block_source=block)
        except loader.SourceError as exc:
            raise BenchInputError(f"variant '{source}': {exc}") from None
        # A case must be callable on every variant (its own method or its adapter's).
        for case in dict.fromkeys([*p.cases, *p.confirm_cases]):
            lacking = [m for m in cases.CASE_METHODS[case] if not variant.can(m)]
            if lacking:
                raise BenchInputError(
                    f"variant '{source}' has no {', '.join(lacking)} (and no adapter for it): "
                    f"case {case} cannot be timed on it"
                )


# ------------------------------------------------------------------ the report


DEFAULT_PAIRS: tuple[tuple[str, str], ...] = (
    ("vllm==0.32.0", "vllm==0.31.0"),  # the upstream change
    ("kvqueue", "vllm==0.32.0"),  # our queue against current upstream
)


@dataclass(frozen=True)
class ReportSettings:
    """Analysis settings of ``make report`` (the report notebook's parameters).

    Attributes
    ----------
    pairs
        ``(candidate, baseline)`` label pairs compared wherever a run has both.
    confidence
        CI level.
    resamples
        Bootstrap resamples (>= 10,000 for the report).
    seed
        Seed of every bootstrap call.
    delta
        Equivalence band of the verdict (fraction).
    method
        scipy bootstrap method.
    """

    pairs: tuple[tuple[str, str], ...] = field(
        default=DEFAULT_PAIRS,
        metadata={"help": "(candidate, baseline) label pairs compared wherever a run has both"},
    )
    confidence: float = field(default=0.95, metadata={"help": "confidence level of the CIs"})
    resamples: int = field(default=10_000, metadata={"help": "bootstrap resamples"})
    seed: int = field(default=20261129, metadata={"help": "seed of every bootstrap call"})
    delta: float = field(
        default=0.01,
        metadata={"help": "no-change band of the verdict, a fraction (0.01: ±1 percent)"},
    )
    method: str = field(
        default="hettmansperger-sheather",
        metadata={
            "help": "CI of the reductions: hettmansperger-sheather (interpolated order-"
            "statistic interval of the median; 94-97% measured coverage), or a "
            "scipy.stats.bootstrap method (percentile, basic, BCa) to bootstrap the median"
        },
    )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ReportSettings:
        """Build settings from JSON-like values (lists become tuples)."""
        values = dict(values)
        if "pairs" in values and not values["pairs"]:
            del values["pairs"]  # [] in the notebook: the default pairs
        if "pairs" in values:
            values["pairs"] = tuple((str(c), str(b)) for c, b in values["pairs"])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready values."""
        out = asdict(self)
        out["pairs"] = [list(p) for p in self.pairs]
        return out

    def bootstrap(self) -> dict[str, Any]:
        """Keyword arguments for the :mod:`kvqueue.analysis.stats` bootstrap functions."""
        return {
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "method": self.method,
        }


#: The report notebook's folder parameters (paths relative to the repository root).
REPORT_PATHS: dict[str, tuple[str, str]] = {
    "raw_dir": ("data/raw", "raw runs to read (relative paths: to the repository root)"),
    "processed_dir": ("data/processed", "where the processed tables are (re)built"),
    "figures_dir": ("reports/figures", "where the figures are written"),
}


# ------------------------------------------------------------------ notebooks


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

_NOTEBOOK_TYPES = {
    "str": "str",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "words": "list[str]",
    "ints": "list[int]",
}


def _literal(value: Any) -> str:
    if isinstance(value, tuple):
        value = [list(v) if isinstance(v, tuple) else v for v in value]
    if isinstance(value, (str, list, dict)):
        return json.dumps(value)
    return repr(value)


def _cell_line(name: str, kind: str, default: Any, help_: str) -> str:
    """One ``name: type = literal  # help`` line that papermill can parse.

    papermill's parser skips any line with more than one ``=``, and the default variants
    and pairs are version pins (``vllm==0.32.0``): such a default is written as an empty
    list, which :func:`from_notebook` and :meth:`ReportSettings.from_dict` read as "the
    default".
    """
    assert "=" not in help_, f"papermill cannot parse a help with '=': {help_}"
    literal = _literal(default)
    if "=" in literal:
        literal, help_ = "[]", f"{help_} ([]: the default, see --help)"
    return f"{name}: {kind} = {literal}  # {help_}"


def bench_parameters_cell() -> str:
    """The source of ``notebooks/bench.ipynb``'s ``parameters`` cell, from the fields.

    One typed literal per line with its help as a comment, the form that
    ``papermill --help-notebook`` reads.
    """
    lines = [
        "# Parameters (papermill). Generated from kvqueue.params.BenchParams: "
        "edit there, then `make notebooks`."
    ]
    for f in bench_fields():
        spec = spec_of(f)
        lines.append(_cell_line(f.name, _NOTEBOOK_TYPES[spec.kind], default_of(f), spec.help))
    for name, (kind, default, help_) in BENCH_NOTEBOOK_EXTRA.items():
        lines.append(_cell_line(name, kind, default, help_))
    return "\n".join(lines)


def report_parameters_cell() -> str:
    """The source of ``notebooks/report.ipynb``'s ``parameters`` cell, from the fields."""
    lines = [
        "# Parameters (papermill). Generated from kvqueue.params.ReportSettings and "
        "REPORT_PATHS: edit there, then `make notebooks`."
    ]
    for name, (default, help_) in REPORT_PATHS.items():
        lines.append(_cell_line(name, "str", default, help_))
    types = {"pairs": "list[list[str]]", "confidence": "float", "resamples": "int"}
    types |= {"seed": "int", "delta": "float", "method": "str"}
    for f in fields(ReportSettings):
        lines.append(_cell_line(f.name, types[f.name], default_of(f), f.metadata["help"]))
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
    # An empty list stands for a default that papermill cannot parse (see _cell_line).
    given = {
        k: v for k, v in given.items() if v != () or "=" not in _literal(default_of(by_name[k]))
    }
    info = values.get("python_info") or {}
    if info:
        # Checked by the CLI: take the values as they are (QUICK was already applied).
        return Checked(BenchParams(**given), dict(info))
    # Opened by hand: a value left at its default counts as not given, so that
    # quick = True still shrinks the sizes nobody chose.
    chosen = {k: v for k, v in given.items() if v != default_of(by_name[k])}
    return make_params(**chosen)


def resolve_in_repo(path: str | Path) -> Path:
    """A notebook path parameter: absolute as given, relative to the repository root."""
    p = Path(path)
    return p if p.is_absolute() else hostinfo.PROJECT_DIR / p


# ------------------------------------------------------------------ policy runs


#: Window factors of a default policy run (``inf``: the unbounded search).
DEFAULT_WINDOWS = ("1", "2", "4", "8", "inf")


@dataclass(frozen=True)
class PolicyParams:
    """Everything that defines a policy run (``make policy``; recorded in ``run.json``).

    The workload fields are those of :class:`kvqueue.policy.churn.Workload` (same names).
    """

    host: str = _param("", "HOST", "label of this machine: a folder under data/raw (required)")
    python: str = _param("python3", "PYTHON", "interpreter to measure (CPython 3.10 or newer)")
    variant: str = _param(
        "vllm==0.32.0", "VARIANT", "queue variant the policies run on (kvqueue, vLLM 0.26.0 on)"
    )
    windows: tuple[str, ...] = _param(
        DEFAULT_WINDOWS,
        "WINDOWS",
        "window factors of the contiguous policy (inf: unbounded)",
        "words",
    )
    threshold: int = _param(
        8, "THRESHOLD", "smallest allocation the contiguous policy searches for", "int"
    )
    processes: int = _param(
        11, "PROCESSES", "worker processes (each its own request stream)", "int"
    )
    seed: int = _param(1, "SEED", "run seed (process seeds, request streams, shuffles)", "int")
    cpu: str = _param("auto", "CPU", "CPU to pin the workers to, or 'auto' (the last one)")
    gc: str = _param("disabled", "GC", "garbage collector while timing: disabled | enabled")
    pool: int = _param(16_384, "POOL", "blocks in the pool", "int")
    concurrency: int = _param(48, "CONCURRENCY", "concurrent requests (closed loop)", "int")
    prefill_median: float = _param(48.0, "PREFILL", "median prefill allocation in blocks", "float")
    prefill_sigma: float = _param(1.0, "PREFILL_SIGMA", "log-SD of the prefill length", "float")
    prefill_max: int = _param(512, "PREFILL_MAX", "longest prefill in blocks", "int")
    decode_median: float = _param(8.0, "DECODE", "median decode growth in blocks", "float")
    decode_sigma: float = _param(0.8, "DECODE_SIGMA", "log-SD of the decode growth", "float")
    decode_max: int = _param(128, "DECODE_MAX", "longest decode growth in blocks", "int")
    decode_every: int = _param(
        16, "DECODE_EVERY", "steps per decode block (tokens per block)", "int"
    )
    prefix_share: float = _param(
        0.5, "PREFIX_SHARE", "share of requests with a cached prompt-family prefix", "float"
    )
    families: int = _param(32, "FAMILIES", "prompt families (Zipf weights)", "int")
    warmup_steps: int = _param(2_000, "WARMUP_STEPS", "engine steps before measuring", "int")
    steps: int = _param(3_000, "STEPS", "measured engine steps per policy and process", "int")

    #: The fields that are the churn workload's.
    WORKLOAD_FIELDS = (
        "pool",
        "concurrency",
        "prefill_median",
        "prefill_sigma",
        "prefill_max",
        "decode_median",
        "decode_sigma",
        "decode_max",
        "decode_every",
        "prefix_share",
        "families",
        "warmup_steps",
        "steps",
    )

    @property
    def policies(self) -> list[str]:
        """Registry names in run order: ``lru``, then one per window."""
        return ["lru", *(f"contig-{'inf' if w == 'inf' else 'w' + w}" for w in self.windows)]

    def workload(self) -> dict[str, Any]:
        """The workload fields as a dict (``kvqueue.policy.churn.Workload(**...)``)."""
        return {name: getattr(self, name) for name in self.WORKLOAD_FIELDS}

    def record(self) -> dict[str, Any]:
        """JSON-ready copy for ``run.json`` (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def policy_fields() -> list[Any]:
    """The fields of :class:`PolicyParams`, in order."""
    return list(fields(PolicyParams))


def policy_from_text(given: Mapping[str, str | bool | None]) -> PolicyParams:
    """Build checked :class:`PolicyParams` from texts keyed by field name (``None``: the
    default).

    Raises
    ------
    BenchInputError
        An unknown name, a text that does not parse, or a bad value.
    """
    specs = {f.name: spec_of(f) for f in policy_fields()}
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise BenchInputError(f"unknown parameter(s): {', '.join(unknown)}")
    values = {k: parse_value(k, specs[k], v) for k, v in given.items() if v is not None}
    try:
        p = PolicyParams(**values)
    except TypeError as exc:
        raise BenchInputError(str(exc)) from None
    check_policy_values(p)
    return p


def policy_environment_texts(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The text of every :class:`PolicyParams` field from ``KVQUEUE_<MAKE VARIABLE>``."""
    out: dict[str, str | None] = {}
    for f in policy_fields():
        text = environ.get(ENV_PREFIX + spec_of(f).make, "")
        out[f.name] = text if text.strip() else None
    return out


def check_policy_values(p: PolicyParams) -> None:
    """Every check of a policy run that needs no process (one line, before anything is
    written).

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    from kvqueue.policy import churn, policies

    check_host(p.host)
    if not p.python:
        raise BenchInputError("PYTHON is empty: give the interpreter to measure")
    if not p.variant or any(not ch.isprintable() for ch in p.variant):
        raise BenchInputError(f"VARIANT {p.variant!r} is empty or holds a control character")
    if not p.windows:
        raise BenchInputError("WINDOWS is empty: give window factors, e.g. 1 2 4 8 inf")
    for w in p.windows:
        if w != "inf" and not (w.isascii() and w.isdecimal() and 1 <= int(w) <= 1000):
            raise BenchInputError(f"WINDOWS takes whole numbers from 1 to 1000 or inf, got {w!r}")
        if w != "inf" and w != str(int(w)):
            # "01" would name a second policy for window 1 in the data.
            raise BenchInputError(f"WINDOWS: write {w!r} without leading zeros ({int(w)})")
    _no_duplicates("windows", p.windows)
    for name in p.policies:
        try:
            policies.get(name)  # the check child and the workers resolve names the same way
        except KeyError as exc:
            raise BenchInputError(f"WINDOWS: {exc.args[0]}") from None
    if not _whole(p.threshold) or not 1 <= p.threshold <= 10_000:
        raise BenchInputError(
            f"threshold must be a whole number from 1 to 10000, got {p.threshold!r}"
        )
    if not _whole(p.processes) or not 1 <= p.processes <= MAX_PROCESSES:
        raise BenchInputError(
            f"processes must be a whole number from 1 to {MAX_PROCESSES}, got {p.processes!r}"
        )
    if not _whole(p.seed):
        raise BenchInputError(f"seed must be a whole number, got {p.seed!r}")
    if p.gc not in ("disabled", "enabled"):
        raise BenchInputError(f"gc must be 'disabled' or 'enabled', got {p.gc!r}")
    if p.cpu != "auto":
        if not str(p.cpu).isdigit():
            raise BenchInputError(f"cpu must be 'auto' or a CPU number, got {p.cpu!r}")
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None and int(p.cpu) not in allowed:
            raise BenchInputError(f"CPU {p.cpu} is not available here (allowed: {allowed})")
    for name in PolicyParams.WORKLOAD_FIELDS:
        kind = spec_of(next(f for f in policy_fields() if f.name == name)).kind
        if kind == "int" and not _whole(getattr(p, name)):
            raise BenchInputError(f"{name} must be a whole number, got {getattr(p, name)!r}")
    problem = churn.Workload(**p.workload()).problem()
    if problem:
        raise BenchInputError(f"workload: {problem}")
    if p.pool > MAX_POOL:
        raise BenchInputError(f"pool must be at most {MAX_POOL:,}, got {p.pool:,}")
    if p.threshold > p.prefill_max:
        # Only prefills reach the threshold (decode grows one block at a time).
        raise BenchInputError(
            f"threshold {p.threshold} is above prefill_max {p.prefill_max}: no allocation "
            "of the workload would reach the contiguous path"
        )


def check_policy(p: PolicyParams) -> tuple[PolicyParams, dict[str, Any]]:
    """Every check of a policy run: values, the interpreter (probed once), the variant.

    Returns
    -------
    tuple
        The parameters with ``python`` resolved, and the interpreter's identity.
    """
    from kvqueue.policy import policies

    check_policy_values(p)
    path, info = check_python(p.python)
    p = replace(p, python=path)
    try:
        (variant,) = loader.load_variants([p.variant])
    except loader.SourceError as exc:
        raise BenchInputError(f"variant '{p.variant}': {exc}") from None
    problem = policies.unsupported(variant)
    if problem:
        raise BenchInputError(f"variant '{p.variant}': {problem}")
    return p, info
