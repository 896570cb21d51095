"""The parameters of a policy run (``make policy``; recorded in ``run.json``):
:class:`PolicyParams`, their defaults, and the value checks that need neither a process
nor the policies themselves. The checks against the policy registry and the churn
workload, and those that start processes, are :mod:`kvqueue.policy.checks`'.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from kvqueue.errors import BenchInputError
from kvqueue.params import spec
from kvqueue.params.checks import (
    MAX_POOL,
    MAX_PROCESSES,
    check_cpu,
    check_gc,
    check_host,
    check_python_given,
    no_duplicates,
    whole,
)
from kvqueue.params.spec import param, spec_of

#: Window factors of a default policy run (``inf``: the unbounded search).
DEFAULT_WINDOWS = ("1", "2", "4", "8", "inf")


@dataclass(frozen=True)
class PolicyParams:
    """Everything that defines a policy run (``make policy``; recorded in ``run.json``).

    The workload fields are those of :class:`kvqueue.policy.churn.Workload` (same names).
    """

    host: str = param("", "HOST", "label of this machine: a folder under data/raw (required)")
    python: str = param("python3", "PYTHON", "interpreter to measure (CPython 3.10 or newer)")
    variant: str = param(
        "vllm==0.32.0", "VARIANT", "queue variant the policies run on (kvqueue, vLLM 0.26.0 on)"
    )
    windows: tuple[str, ...] = param(
        DEFAULT_WINDOWS,
        "WINDOWS",
        "window factors of the contiguous policy (inf: unbounded)",
        "words",
    )
    threshold: int = param(
        8, "THRESHOLD", "smallest allocation the contiguous policy searches for", "int"
    )
    processes: int = param(11, "PROCESSES", "worker processes (each its own request stream)", "int")
    seed: int = param(1, "SEED", "run seed (process seeds, request streams, shuffles)", "int")
    cpu: str = param("auto", "CPU", "CPU to pin the workers to, or 'auto' (the last one)")
    gc: str = param("disabled", "GC", "garbage collector while timing: disabled | enabled")
    pool: int = param(16_384, "POOL", "blocks in the pool", "int")
    concurrency: int = param(48, "CONCURRENCY", "concurrent requests (closed loop)", "int")
    prefill_median: float = param(48.0, "PREFILL", "median prefill allocation in blocks", "float")
    prefill_sigma: float = param(1.0, "PREFILL_SIGMA", "log-SD of the prefill length", "float")
    prefill_max: int = param(512, "PREFILL_MAX", "longest prefill in blocks", "int")
    decode_median: float = param(8.0, "DECODE", "median decode growth in blocks", "float")
    decode_sigma: float = param(0.8, "DECODE_SIGMA", "log-SD of the decode growth", "float")
    decode_max: int = param(128, "DECODE_MAX", "longest decode growth in blocks", "int")
    decode_every: int = param(
        16, "DECODE_EVERY", "steps per decode block (tokens per block)", "int"
    )
    prefix_share: float = param(
        0.5, "PREFIX_SHARE", "share of requests with a cached prompt-family prefix", "float"
    )
    families: int = param(32, "FAMILIES", "prompt families (Zipf weights)", "int")
    warmup_steps: int = param(2_000, "WARMUP_STEPS", "engine steps before measuring", "int")
    steps: int = param(3_000, "STEPS", "measured engine steps per policy and process", "int")

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


def from_text(given: Mapping[str, str | bool | None]) -> PolicyParams:
    """Build :class:`PolicyParams` from texts keyed by field name (``None``: the default),
    each field checked on its own (:func:`check_fields`); the checks across fields are
    :func:`kvqueue.policy.checks.check_values`'.

    Raises
    ------
    BenchInputError
        An unknown name, a text that does not parse, or a bad value.
    """
    values = spec.parse_texts(policy_fields(), given)
    try:
        p = PolicyParams(**values)
    except TypeError as exc:
        raise BenchInputError(str(exc)) from None
    check_fields(p)
    return p


def environment_texts(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The text of every :class:`PolicyParams` field from ``KVQUEUE_<MAKE VARIABLE>``."""
    return spec.environment_texts(policy_fields(), environ)


def check_fields(p: PolicyParams) -> None:
    """The checks of each field of a policy run on its own (one line, before anything is
    written); :func:`kvqueue.policy.checks.check_values` runs them, then the policy
    registry's and the workload's, then :func:`check_bounds`.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    check_host(p.host)
    check_python_given(p.python)
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
    no_duplicates("windows", p.windows)
    if not whole(p.threshold) or not 1 <= p.threshold <= 10_000:
        raise BenchInputError(
            f"threshold must be a whole number from 1 to 10000, got {p.threshold!r}"
        )
    if not whole(p.processes) or not 1 <= p.processes <= MAX_PROCESSES:
        raise BenchInputError(
            f"processes must be a whole number from 1 to {MAX_PROCESSES}, got {p.processes!r}"
        )
    if not whole(p.seed):
        raise BenchInputError(f"seed must be a whole number, got {p.seed!r}")
    check_gc(p.gc)
    check_cpu(p.cpu)
    for name in PolicyParams.WORKLOAD_FIELDS:
        kind = spec_of(next(f for f in policy_fields() if f.name == name)).kind
        if kind == "int" and not whole(getattr(p, name)):
            raise BenchInputError(f"{name} must be a whole number, got {getattr(p, name)!r}")


def check_bounds(p: PolicyParams) -> None:
    """The bounds of a policy run's workload that the churn model does not check: the
    pool's size, and a threshold that some allocation can reach.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    if p.pool > MAX_POOL:
        raise BenchInputError(f"pool must be at most {MAX_POOL:,}, got {p.pool:,}")
    if p.threshold > p.prefill_max:
        # Only prefills reach the threshold (decode grows one block at a time).
        raise BenchInputError(
            f"threshold {p.threshold} is above prefill_max {p.prefill_max}: no allocation "
            "of the workload would reach the contiguous path"
        )
