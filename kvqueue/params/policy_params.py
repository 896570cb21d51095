"""The parameters of a policy run (``make policy``; recorded in ``run.json``):
:class:`PolicyParams`, their defaults, and the value checks that need neither a process
nor the policies themselves. The checks against the policy registry and the churn
workload, and those that start processes, are :mod:`kvqueue.policy.policy_checks`'.

Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from kvqueue.errors import BenchInputError
from kvqueue.params import spec
from kvqueue.params.spec import param, spec_of
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

#: KV regions per block on one rank, the default: vLLM's NIXL connector posts one
#: descriptor per (region, block), descriptor id ``region_id * num_blocks + block_id``,
#: over 2 x layers regions when K and V are kept apart (layers for MLA). Llama-3.1-8B's
#: public configuration has ``num_hidden_layers: 32``: 64 regions on one rank (TP 1).
DEFAULT_KV_REGIONS = 64

#: Longest run in pool turnovers (a bound on a typo's cost, not a measured limit).
MAX_TURNOVERS = 100_000.0
#: Window factors of a default policy run (``inf``: the unbounded search).
DEFAULT_WINDOWS = ("1", "2", "4", "8", "inf")
#: The regime of a run that names none.
DEFAULT_REGIME = "chat"
#: Workload regimes: the values ``REGIME`` gives the workload fields that were not given
#: (``custom``: none, the field defaults, the project's workload of before).
#: chat: short prompts with a high prefix-hit rate (16-token blocks: ~200-token prompts,
#: 8 shared system prompts, 96 sessions). agentic: as in vLLM PR #55841, ~60 concurrent
#: long sessions with 128-token blocks (median prompt 256 blocks = 32k tokens, each
#: session's history reused), so fewer and larger allocations.
REGIME_PRESETS: dict[str, dict[str, Any]] = {
    "custom": {},
    "chat": {
        "pool": 16_384,
        "concurrency": 96,
        "prefill_median": 12.0,
        "prefill_sigma": 0.8,
        "prefill_max": 128,
        "decode_median": 12.0,
        "decode_sigma": 0.8,
        "decode_max": 128,
        "decode_every": 16,
        "prefix_share": 0.9,
        "families": 8,
    },
    "agentic": {
        "pool": 32_768,
        "concurrency": 60,
        "prefill_median": 256.0,
        "prefill_sigma": 0.5,
        "prefill_max": 1024,
        "decode_median": 4.0,
        "decode_sigma": 0.8,
        "decode_max": 32,
        "decode_every": 128,
        "prefix_share": 0.9,
        "families": 60,
    },
}


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
    free_order: str = param(
        "vllm", "FREE_ORDER", "free path: vllm (unhashed prepended) | append (all appended)"
    )
    hold_steps: int = param(
        2, "HOLD_STEPS", "steps the prefill side holds a request before releasing it", "int"
    )
    prefill_release: str = param(
        "free",
        "PREFILL_RELEASE",
        "prefill side's release: free (vLLM's free path) | unpin (last-resort candidates)",
    )
    regime: str = param(
        DEFAULT_REGIME,
        "REGIME",
        "workload regime: chat | agentic | custom (REGIME_PRESETS; given variables override)",
    )
    warmup_turnovers: float = param(
        200.0, "WARMUP_TURNOVERS", "engine age (pool turnovers) where measuring starts", "float"
    )
    turnovers: float = param(
        400.0, "TURNOVERS", "engine age (pool turnovers) where the run ends", "float"
    )
    trace: str = param("", "TRACE", "JSON Lines trace to replay instead of the workload")
    trace_out: str = param(
        "", "TRACE_OUT", "write the synthetic workload as a trace to this file (runs nothing)"
    )
    desc_cost_ns: float = param(
        3423.0,
        "DESC_COST_NS",
        "posting cost per descriptor, ns (PR #55841: 79.6 ms / 23,252 descriptors)",
        "float",
    )
    kv_regions: int = param(
        DEFAULT_KV_REGIONS,
        "KV_REGIONS",
        "KV regions per block on one rank: descriptors one block-run of a READ posts "
        "(2 x layers with K and V apart, layers for MLA; 64: Llama-3.1-8B)",
        "int",
    )

    #: The fields that are the churn workload's (``warmup_steps``/``steps`` stay the
    #: check's: a policy run counts age in turnovers).
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
        "free_order",
        "hold_steps",
        "prefill_release",
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


#: The values a sensitivity run may change in a regime, named in its label.
SENSITIVITY_FIELDS = ("free_order", "prefill_release", "prefix_share", "families", "hold_steps")


def regime_label(p: PolicyParams) -> str:
    """``REGIME``, with every :data:`SENSITIVITY_FIELDS` value that differs from the
    regime's preset (or the field default), e.g. ``chat, free order append``."""
    preset = REGIME_PRESETS.get(p.regime, {})
    defaults = {f.name: f.default for f in policy_fields()}
    parts = [p.regime]
    for name in SENSITIVITY_FIELDS:
        value = getattr(p, name)
        if value != preset.get(name, defaults[name]):
            parts.append(f"{name.replace('_', ' ')} {value}")
    return ", ".join(parts)


def policy_fields() -> list[Any]:
    """The fields of :class:`PolicyParams`, in order."""
    return list(fields(PolicyParams))


#: Fields that a reproduce command writes from elsewhere (host label, executable) or that
#: make a run write a trace instead of measuring.
_NOT_ASSIGNED = ("host", "python", "trace_out")


def make_assignments(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The Make variables that repeat a policy run, from its ``run.json`` ``parameters``.

    Every field is written out, the regime's preset values included, so that the
    command still repeats the run after a default or a preset changes. ``host`` and
    ``python`` are left to the caller.

    Returns
    -------
    list of (str, str)
        ``(MAKE_VARIABLE, text)`` in field order; texts parse back with
        :func:`kvqueue.params.spec.parse_value` to the recorded values.
    """
    return spec.make_assignments(policy_fields(), record, _NOT_ASSIGNED)


def from_text(given: Mapping[str, str | bool | None]) -> PolicyParams:
    """Build :class:`PolicyParams` from texts keyed by field name (``None``: the default),
    each field checked on its own (:func:`check_fields`); the checks across fields are
    :func:`kvqueue.policy.policy_checks.check_values`'.

    Raises
    ------
    BenchInputError
        An unknown name, a text that does not parse, or a bad value.
    """
    values = spec.parse_texts(policy_fields(), given)
    regime = values.get("regime", DEFAULT_REGIME)
    preset = REGIME_PRESETS.get(str(regime))
    if preset is None:
        raise BenchInputError(f"REGIME must be one of {', '.join(REGIME_PRESETS)}, got {regime!r}")
    for name, value in preset.items():
        values.setdefault(name, value)  # a variable given on its own overrides the regime
    try:
        p = PolicyParams(**values)
    except TypeError as exc:
        raise BenchInputError(str(exc)) from None
    check_fields(p)
    return p


def check_fields(p: PolicyParams) -> None:
    """The checks of each field of a policy run on its own (one line, before anything is
    written); :func:`kvqueue.policy.policy_checks.check_values` runs them, then the policy
    registry's and the workload's, then :func:`check_bounds`.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    if not p.trace_out:  # writing a trace measures nothing: no machine label
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
    if p.regime not in REGIME_PRESETS:
        raise BenchInputError(
            f"REGIME must be one of {', '.join(REGIME_PRESETS)}, got {p.regime!r}"
        )
    if isinstance(p.kv_regions, bool) or not isinstance(p.kv_regions, int) or p.kv_regions < 1:
        raise BenchInputError(f"KV_REGIONS must be a whole number >= 1, got {p.kv_regions!r}")
    if not math.isfinite(p.desc_cost_ns):
        raise BenchInputError(f"DESC_COST_NS must be a finite number, got {p.desc_cost_ns!r}")
    for name in ("warmup_turnovers", "turnovers", "desc_cost_ns"):
        value = getattr(p, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise BenchInputError(f"{name} must be a number >= 0, got {value!r}")
    if not p.warmup_turnovers < p.turnovers <= MAX_TURNOVERS:
        raise BenchInputError(
            f"WARMUP_TURNOVERS ({p.warmup_turnovers}) must be below TURNOVERS "
            f"({p.turnovers}), which is at most {MAX_TURNOVERS}"
        )
    for name in ("trace", "trace_out"):
        if any(not ch.isprintable() for ch in getattr(p, name)):
            raise BenchInputError(f"{name.upper()} holds a control character")
    if p.trace and p.trace_out:
        raise BenchInputError("TRACE and TRACE_OUT together: replay a trace or write one")
    for name in PolicyParams.WORKLOAD_FIELDS:
        if name in ("free_order", "prefill_release"):
            continue  # checked with the workload (kvqueue.policy.churn.Workload.problem)
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


#: What ``TRACE_OUT`` reads: the synthetic workload's events under ``lru`` depend on the
#: workload (and its regime preset), the seed and the length; the age windows are
#: checked as for a run (``WARMUP_TURNOVERS`` below ``TURNOVERS``).
TRACE_OUT_READS = frozenset(
    {*PolicyParams.WORKLOAD_FIELDS, "regime", "seed", "turnovers", "warmup_turnovers", "trace_out"}
)


def unread_with_a_trace(texts: Mapping[str, str | None]) -> list[str]:
    """The Make variables given (``texts``: field -> text, ``None`` not given) that a run
    with ``TRACE`` or ``TRACE_OUT`` would not read: a trace brings its own workload (its
    pool and requests), and ``TRACE_OUT`` writes events and measures nothing. Both were
    silently ignored (and a replay recorded the ignored workload in run.json)."""
    given = [name for name, text in texts.items() if text is not None and text != ""]
    if texts.get("trace"):
        unread = [n for n in given if n in PolicyParams.WORKLOAD_FIELDS or n == "regime"]
    elif texts.get("trace_out"):
        unread = [n for n in given if n not in TRACE_OUT_READS]
    else:
        return []
    names = {f.name: spec_of(f).make or f.name.upper() for f in policy_fields()}
    return [names[n] for n in unread]
