"""The parameters of ``make regress`` (:mod:`kvqueue.ab.regression_check`): the two
sources compared, the thresholds, where the Markdown goes, and the bench parameters the
count shares with ``make bench`` (interpreter, cases, pools, block mode, gate operations,
subject); and the command's exit statuses (:data:`EXIT_STATUSES`).

The bench's own fields are reused, not declared again (their help, kind and checks are
:class:`~kvqueue.params.bench_params.BenchParams`'), with the defaults of a check that a
contributor or CI runs on every change (:data:`REGRESS_DEFAULTS`).

Standard library only: ``python -m kvqueue`` imports this under a bare interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchInputError, GateRefused, MachineBusy
from kvqueue.params import bench_params, spec
from kvqueue.params.bench_params import BenchParams
from kvqueue.params.spec import param

#: Default threshold, in percent of the base's instructions per operation: 10x the
#: spread of counts of identical code, measured here (valgrind 3.19.0, 2 vCPUs, pool
#: 2,048, the seven cases). Two zero runs of one process agree to 0.02-1.6 instructions
#: per operation (<= 0.06 %); the same class at two commits (a comment-only change)
#: counted as base and head differed by up to 0.04 % on CPython 3.11.7 and 3.10.13, 0.10 %
#: on 3.12.1 and 0.13 % on 3.13.0 (0.12 % on 3.12.1 at pool 100,000) without the
#: collection that the counted worker's final ``gc.enable()`` used to start in some
#: target runs (0.31 % on 3.12.1 and 4.1 % on 3.13.0 with it; the worker now leaves the
#: collector off and ends with ``os._exit``: docs/appendix-counts.md). The same
#: source counted twice in one run (AA=1): within 0.04 % on 3.11.7. 1 % is ~10x the
#: largest of these (0.13 %), the threshold of ``make check-queue``, and far below what a
#: real slowdown adds (8 wasted loop iterations in ``popleft``: +82 % on popappend).
DEFAULT_THRESHOLD_PCT = 1.0
#: A threshold is never below this many times the run's own measured resolution (its
#: two identical zero runs): a smaller one would flag the count's own noise.
RESOLUTION_FACTOR = 10.0
#: The bench fields that ``make regress`` reads, in the order ``--help`` lists them.
BENCH_FIELDS = ("python", "cases", "pools", "block_mode", "gate_ops", "subject")
#: Defaults that differ from the bench's: one pool (each count at 100,000 blocks takes
#: ~3x as long: 28 s against ~10 s here), so the 17 counts of the bench's seven cases
#: take ~2 minutes on 2 vCPUs; POOLS="2048 100000" counts both.
REGRESS_DEFAULTS: dict[str, Any] = {"pools": (2048,)}
#: Labels given to an unnamed BASE and HEAD (``NAME=SOURCE`` keeps its name).
BASE_LABEL = "base"
HEAD_LABEL = "head"

#: Exit statuses of ``python -m kvqueue regress``, one per outcome, distinct so that CI
#: tells a regression from a refusal or a broken input (``make regress`` exits 2 for
#: any of them but 0: Make's own status for a failed recipe, its ``Error N`` line naming
#: the command's N). A stop by a signal exits 128 + its number (130 Ctrl-C, 143 SIGTERM).
EXIT_PASSED = 0
EXIT_REGRESSED = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_NOT_COUNTED = 4
#: Status -> what it means (the Markdown's last words, ``--help`` and the README).
EXIT_STATUSES: dict[int, str] = {
    EXIT_PASSED: "passed: no cell regressed beyond its threshold, or base and head run "
    "identical code (nothing counted)",
    EXIT_REGRESSED: "regressed: a cell executes more instructions per operation than its "
    "threshold allows",
    EXIT_BAD_INPUT: "bad input: a parameter, a source, the interpreter or valgrind",
    EXIT_REFUSED: "refused by the validation gate: a source breaks the contract, nothing counted",
    EXIT_NOT_COUNTED: "not counted: a counted process failed or the machine lock was held",
}


def exit_status_of(exc: BaseException) -> int:
    """The exit status of an error that ended ``make regress`` (:data:`EXIT_STATUSES`):
    bad input 2, a gate refusal 3, any other failure (a counted process, the machine lock
    held by another measurement) 4."""
    if isinstance(exc, BenchInputError) and not isinstance(exc, MachineBusy):
        return EXIT_BAD_INPUT
    return EXIT_REFUSED if isinstance(exc, GateRefused) else EXIT_NOT_COUNTED


#: What each subject counts of a source: the Markdown names it, and says where else a
#: change may be when base and head run identical code. A subject not listed is named
#: by its ``SUBJECT`` value (:func:`subject_reads`).
SUBJECT_READS: dict[str, str] = {
    schema.SUBJECT_QUEUE: "the `FreeKVCacheBlockQueue` and `KVCacheBlock` classes of "
    "vllm/v1/core/kv_cache_utils.py",
    schema.SUBJECT_POOL: "vllm/v1/core/block_pool.py, kv_cache_utils.py and "
    "kv_cache_metrics.py, whole (the `BlockPool` with the queue and block it runs)",
    schema.SUBJECT_MANAGER: "the `KVCacheManager` stack: kv_cache_manager.py, "
    "kv_cache_coordinator.py, single_type_kv_cache_manager.py, block_pool.py, "
    "kv_cache_metrics.py and vllm/v1/request.py whole, kv_cache_utils.py and vllm/utils cut "
    "to what they import",
}


def subject_reads(subject: str) -> str:
    """What ``SUBJECT=subject`` counts of a source (:data:`SUBJECT_READS`)."""
    return SUBJECT_READS.get(subject, f"what SUBJECT={subject} reads")


@dataclass(frozen=True)
class RegressParams:
    """What ``make regress`` compares and how it judges the change."""

    base: str = param(
        "", "BASE", "source the change starts from, e.g. git:$HOME/vllm@main (required)"
    )
    head: str = param("", "HEAD", "source with the change, e.g. git:$HOME/vllm@mine (required)")
    threshold: float = param(
        DEFAULT_THRESHOLD_PCT,
        "THRESHOLD",
        "a case fails when head executes more than this % more instructions per op than base",
        "float",
    )
    thresholds: tuple[str, ...] = param(
        (), "THRESHOLDS", "per-case thresholds in %, CASE=PCT words (alloc1=1.0 mix=0.2)", "words"
    )
    out: str = param("", "OUT", "also write the Markdown to this file ('': standard output only)")


@dataclass(frozen=True)
class Regress:
    """Checked parameters of one regression check.

    Attributes
    ----------
    params
        The regression parameters as given.
    bench
        The count's bench parameters: BASE and HEAD as the two variants, labelled
        (:data:`BASE_LABEL`, :data:`HEAD_LABEL` unless named), ``metric`` instructions.
    per_case
        Case -> threshold in % (every counted case: THRESHOLDS, else THRESHOLD).
    """

    params: RegressParams
    bench: BenchParams
    per_case: Mapping[str, float]


def own_fields() -> list[Any]:
    """The fields of :class:`RegressParams`, in order."""
    return list(fields(RegressParams))


def regress_fields() -> list[Any]:
    """Every field ``make regress`` reads: its own, then the bench's :data:`BENCH_FIELDS`."""
    bench = {f.name: f for f in bench_params.bench_fields()}
    return own_fields() + [bench[name] for name in BENCH_FIELDS]


def _percent(name: str, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= 100:
        raise BenchInputError(f"{name} must be a percentage above 0 and at most 100, got {value:g}")
    return value


def labelled(text: str, label: str) -> str:
    """``NAME=SOURCE`` as given, or ``label=SOURCE`` for an unnamed source (so that
    BASE and HEAD may be the same source: an A/A check)."""
    name, _ = schema.split_name(text)
    return text if name else f"{label}={text}"


def per_case_thresholds(
    words: tuple[str, ...], default: float, cases: tuple[str, ...]
) -> dict[str, float]:
    """Case -> threshold in %: ``CASE=PCT`` words over ``default`` for every case.

    Raises
    ------
    BenchInputError
        A word that is not ``CASE=PCT``, a case that is not counted (a typo would leave
        that case at the default unnoticed), a case named twice, or a bad percentage.
    """
    out = dict.fromkeys(cases, default)
    seen: set[str] = set()
    for word in words:
        case, sep, text = word.partition("=")
        if not sep or not case or not text:
            raise BenchInputError(f"THRESHOLDS: {word!r} is not CASE=PCT (e.g. alloc1=1.0)")
        if case not in cases:
            raise BenchInputError(
                f"THRESHOLDS: {case!r} is not a counted case (CASES: {' '.join(cases)})"
            )
        if case in seen:
            raise BenchInputError(f"THRESHOLDS names {case} twice")
        seen.add(case)
        try:
            value = float(text)
        except ValueError:
            raise BenchInputError(f"THRESHOLDS: {word!r}: {text!r} is not a number") from None
        out[case] = _percent(f"THRESHOLDS {case}", value)
    return out


def from_text(given: Mapping[str, str | bool | None]) -> Regress:
    """Parse and check the texts of :func:`regress_fields` (``None``: the default).

    Raises
    ------
    BenchInputError
        A missing BASE or HEAD, or the first bad value (one line); nothing is started.
    """
    own_names = {f.name for f in own_fields()}
    mine = {k: v for k, v in given.items() if k in own_names}
    rest = {k: v for k, v in given.items() if k not in own_names}
    p = RegressParams(**spec.parse_texts(own_fields(), mine))
    for name, value in (("BASE", p.base), ("HEAD", p.head)):
        if not value.strip():
            raise BenchInputError(
                f"{name} is missing: give a source, e.g. BASE=git:$HOME/vllm@main "
                "HEAD=git:$HOME/vllm@mine"
            )
        if len(value.split()) > 1:
            raise BenchInputError(f"{name} takes one source, got {value!r}")
    _percent("THRESHOLD", p.threshold)
    values = {**REGRESS_DEFAULTS, **bench_params.parse_texts(rest)}
    bench = bench_params.make_params(
        **values,
        host="regress",
        variants=(labelled(p.base.strip(), BASE_LABEL), labelled(p.head.strip(), HEAD_LABEL)),
        metric="instructions",
    )
    return Regress(p, bench, per_case_thresholds(p.thresholds, p.threshold, bench.cases))


def subject_defaults(subject: str) -> BenchParams:
    """The bench parameters of ``make regress SUBJECT=subject`` given nothing else (its
    cases and pools: a reproduce command writes only what differs)."""
    return from_text({"base": BASE_LABEL, "head": HEAD_LABEL, "subject": subject}).bench
