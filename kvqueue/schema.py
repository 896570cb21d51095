"""Every on-disk format of the project, shared by its writers and its readers.

See ``docs/design.md`` §6 (data layout). Raw data: ``data/raw/<host>/<run-id>/`` holds,
write-once:

``run.json``
    One JSON object; keys listed in :data:`RUN_KEYS`. ``status`` is ``"complete"`` only
    when every planned process finished; ``"running"`` (runner died hard),
    ``"interrupted"`` (Ctrl-C) or ``"failed"`` otherwise. Readers leave incomplete runs out.
``samples.csv``
    One row per timed sample, columns :data:`SAMPLE_COLUMNS`:

    - ``process``: 1-based index of the worker process within its phase;
    - ``phase``: ``"main"`` or ``"confirm"`` (the confirmation run);
    - ``case``: a case of its subject (:func:`is_case`; the defaults: :data:`CASES`);
      ``pool``: pool size in blocks;
    - ``variant``: the variant label (source string; ``#2`` marks an A/A duplicate);
    - ``sample``: 0-based sample round; ``order_position``: 0-based position of this
      variant in that round's shuffled order;
    - ``loops``: timed loop iterations; ``ops_per_loop``: units per iteration (100 for
      ``mix``, else 1); ``ns_total``: ``perf_counter_ns`` difference;
    - ``ns_per_cycle`` = ``ns_total / (loops * ops_per_loop)``;
    - ``epoch``: 0-based layout epoch of the process in which the sample was taken (the
      worker re-creates classes, queues, runners and heap padding at each epoch; version
      3 on, read as 0 for older runs).
``bench.ipynb``
    The executed bench notebook (papermill record).

Processed data: ``data/processed/<table>.csv`` with the columns and dtypes of
:data:`PROCESSED_TABLES`, floats written with :data:`PROCESSED_FLOAT_FORMAT`.

Standard library only (the runner and the worker import it under a bare interpreter).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

#: Version 2 added ``files`` (sha256 and row count of ``samples.csv``, sha256 of
#: ``bench.ipynb``), ``launcher``, the interpreter's flags in ``python`` and the effective
#: ``parameters.confirm_cases``. Readers take every version in :data:`READABLE_VERSIONS`.
#: Version 3 added the ``epoch`` column of ``samples.csv`` and ``parameters.epochs``.
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: ``run.json`` key of the digests of the run's files (version 2 on).
FILES_KEY = "files"

RUN_JSON = "run.json"
SAMPLES_CSV = "samples.csv"
#: The executed bench notebook in a run folder (its source is
#: ``kvqueue.measure.run_notebook.BENCH_NOTEBOOK_PATH``).
RUN_NOTEBOOK = "bench.ipynb"

SAMPLE_COLUMNS = (
    "process",
    "phase",
    "case",
    "pool",
    "variant",
    "sample",
    "order_position",
    "loops",
    "ops_per_loop",
    "ns_total",
    "ns_per_cycle",
    "epoch",
)
#: ``samples.csv`` columns of schema versions 1 and 2 (before layout epochs): read with
#: ``epoch`` 0, since every such process timed all its rounds on one layout.
SAMPLE_COLUMNS_V1 = SAMPLE_COLUMNS[:-1]


def sample_columns(schema_version: int) -> tuple[str, ...]:
    """The ``samples.csv`` header a run of ``schema_version`` writes."""
    return SAMPLE_COLUMNS if schema_version >= 3 else SAMPLE_COLUMNS_V1


RUN_KEYS = (
    "schema_version",
    "run_id",
    "host",
    "status",
    "started_at",
    "ended_at",
    "machine",  # hostname, cpu_model, cpu_count, kernel, platform, governor, load_avg_*
    "python",  # executable, version, implementation, build, compiler
    "baseline",  # label of the baseline variant
    "variants",  # list of provenance dicts (+ gate results), baseline first
    "parameters",  # processes, confirm_processes, samples, sample_ms, pools, cases, ...
    "seeds",  # run seed, gate seed, per-process seeds
    "project",  # commit, dirty
    "processes_planned",  # {"main": n, "confirm": m}
    "processes_completed",  # {"main": n, "confirm": m}
    "process_info",  # per process: phase, process, cpu, pinned, seed, loops, seconds
)
#: Keys a run.json may hold besides the required ones: ``error`` (a failed run's reason),
#: ``sizing`` (the precision target's decision after the pilot, version 3 on) and
#: ``kind`` (what the run measured, :data:`RUN_KINDS`; absent = ``"bench"``).
RUN_KEYS_OPTIONAL = ("error", "sizing", "kind")

#: ``run.json`` key naming what a run measured.
KIND_KEY = "kind"
#: A/B bench run (``make bench``): the headline, A/A coverage and precision read these.
KIND_BENCH = "bench"
#: Release-history run (``make history``): bench-format files, its own report section.
KIND_HISTORY = "history"
#: Allocation-policy run (``make policy``): its own files and report section.
KIND_POLICY = "policy"
#: A run of instruction counts (``METRIC=instructions``): ``counts.csv`` beside run.json.
KIND_COUNTS = "counts"
RUN_KINDS = (KIND_BENCH, KIND_HISTORY, KIND_POLICY, KIND_COUNTS)
#: Kinds whose folders hold a bench-format ``samples.csv`` and the bench run.json keys.
BENCH_FORMAT_KINDS = (KIND_BENCH, KIND_HISTORY)
#: The run.json keys every kind has (the rest of :data:`RUN_KEYS` are bench-format only).
COMMON_RUN_KEYS = (
    "schema_version",
    "run_id",
    "host",
    "status",
    "started_at",
    "ended_at",
    "machine",
    "python",
    "parameters",
    "seeds",
    "project",
)


def run_kind(meta: dict) -> str:
    """What a run measured: ``meta["kind"]``, or ``"bench"`` for runs before kinds existed."""
    return str(meta.get(KIND_KEY, KIND_BENCH))


#: Keys that version 2 adds to :data:`RUN_KEYS`.
RUN_KEYS_V2 = (
    FILES_KEY,  # {"samples.csv": {"sha256", "rows"}, "bench.ipynb": {"sha256"}}
    "launcher",  # {"pid"}: the process that started the run (the CLI)
)

CASES = ("alloc1", "alloc2", "alloc8", "alloc32", "mix", "popappend", "remove")
CONFIRM_CASES = ("alloc1", "alloc2", "remove")
#: What a run measures (``parameters.subject``): vLLM's free-block queue, its
#: ``BlockPool`` (the allocation path that drives the queue), or the scheduler's
#: ``KVCacheManager`` stack (manager → coordinator → single-type manager → pool → queue).
SUBJECT_QUEUE, SUBJECT_POOL, SUBJECT_MANAGER = "queue", "pool", "manager"
SUBJECTS = (SUBJECT_QUEUE, SUBJECT_POOL, SUBJECT_MANAGER)
#: The pool subject's cases (:mod:`kvqueue.subjects.pool_cases`): vLLM's own benchmark
#: loop at its five sizes, and a prefix-caching churn of whole requests.
POOL_CASES = ("loop10", "loop50", "loop100", "loop500", "loop1000", "churn")
POOL_CONFIRM_CASES = ("loop100", "churn")
#: The manager subject's cases (:mod:`kvqueue.subjects.manager_cases`): one request of N
#: blocks admitted and freed with no hit, at the sizes of vLLM PR #21005's claim, and one
#: step of a serving-shaped stream.
MANAGER_CASES = ("sweep10", "sweep30", "sweep100", "sweep300", "sweep1000", "stream")
MANAGER_CONFIRM_CASES = ("sweep100", "stream")
#: The scheduler's calls in a step of the manager's ``stream``, by purpose: building the
#: request (``Request()``, which hashes its blocks from 0.10.1), ``get_computed_blocks``,
#: ``allocate_slots`` of a prompt and of one decode token, ``free``.
MANAGER_CALLS = ("request", "lookup", "prefill", "decode", "free")
#: Every default case of every subject, in table order (a samples.csv holds cases of any
#: size: :func:`is_case`).
ALL_CASES = (*CASES, *POOL_CASES, *MANAGER_CASES)
#: Each subject's cases, and the label prefix of its variants (a pool of ``vllm==0.33.0``,
#: that release's manager and its queue are three subjects, never one comparison).
SUBJECT_CASES = {SUBJECT_QUEUE: CASES, SUBJECT_POOL: POOL_CASES, SUBJECT_MANAGER: MANAGER_CASES}
SUBJECT_CONFIRM_CASES = {
    SUBJECT_QUEUE: CONFIRM_CASES,
    SUBJECT_POOL: POOL_CONFIRM_CASES,
    SUBJECT_MANAGER: MANAGER_CONFIRM_CASES,
}
#: The *sized* case families: ``<family>N`` takes any N >= 1 (the cases above are only
#: the defaults), by subject: the queue's ``allocN`` (``popleft_n(N)`` + ``append_n``)
#: and ``popleftN`` (``popleft_n(N)`` alone), the pool's ``loopN``, the manager's
#: ``sweepN``. :func:`case_size` is the one parser of N.
SIZED_FAMILIES = {
    SUBJECT_QUEUE: ("alloc", "popleft"),
    SUBJECT_POOL: ("loop",),
    SUBJECT_MANAGER: ("sweep",),
}
#: Each subject's cases that take no size.
FIXED_CASES = {
    SUBJECT_QUEUE: ("mix", "popappend", "remove"),
    SUBJECT_POOL: ("churn",),
    SUBJECT_MANAGER: ("stream",),
}
#: Table order of the families and fixed cases (:func:`case_rank`): a sized family's
#: cases sort by N where the family stands.
CASE_ORDER = (
    "alloc", "popleft", "mix", "popappend", "remove", "loop", "churn", "sweep", "stream"
)  # fmt: skip
#: N is written in decimal digits, without a sign or a leading zero, at most 9 of them
#: (pools hold at most 10 million blocks, so a larger N fits no pool).
_SIZE_RE = re.compile(r"[1-9][0-9]{0,8}")
_RANK_STEP = 10**9
POOLS = (2048, 100_000)
#: Smallest pool a bench accepts and the gate checks: ``alloc32`` pops 32 blocks, and
#: ``remove`` needs interior blocks.
MIN_POOL = 64
PHASES = ("main", "confirm")
#: ``parameters.block_mode`` of a run: one ``KVCacheBlock`` class for every variant
#: (``shared``), or each variant's release's own (``own``).
BLOCK_MODES = ("shared", "own")


# ------------------------------------------------------------------ run folders


def new_run_id(python_tag: str, kind: str = KIND_BENCH) -> str:
    """Return a fresh run id: UTC time, the kind, interpreter tag and a random suffix.

    Parameters
    ----------
    python_tag
        ``sys.implementation.cache_tag`` of the measured interpreter (``cpython-312``).
    kind
        What the run measures (:data:`RUN_KINDS`). A bench run keeps the original shape
        without it, so the kind shows in the names of history and policy runs only.

    Returns
    -------
    str
        E.g. ``20261201T093000Z-cp312-1a2b`` (bench) or
        ``20261201T093000Z-history-cp312-1a2b``: sorts by time, names the kind and the
        interpreter. Run folders from before the kind was named (every kind then had the
        bench shape) keep their names; nothing parses a run id, readers only compare it
        with its folder's name.
    """
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    tag = python_tag.replace("cpython-", "cp")
    named = "" if kind == KIND_BENCH else f"{kind}-"
    return f"{stamp}-{named}{tag}-{secrets.token_hex(2)}"


def run_path(raw_dir: Path | str, host: str, run_id: str) -> Path:
    """The folder of one run: ``<raw_dir>/<host>/<run_id>``."""
    return Path(raw_dir) / host / run_id


# ------------------------------------------------------------------ variant labels


#: ``resolved_path`` of a ``git:REPO@REF`` variant in ``run.json`` ``variants``
#: (kvqueue.sources.loader): ``REPO@COMMIT:MEMBER``.
_GIT_RESOLVED = re.compile(r"@([0-9a-f]{40}):")


def git_commit_of(resolved_path: object) -> str | None:
    """The commit a ``git:REPO@REF`` variant was read at, from its ``resolved_path``
    (None for any other source)."""
    found = _GIT_RESOLVED.search(str(resolved_path or ""))
    return found.group(1) if found else None


def pin_git_ref(source: str, commit: str | None) -> str:
    """``git:REPO@REF`` with ``REF`` replaced by ``commit`` (a branch names another
    commit tomorrow), a ``::ClassName`` suffix kept; any other source, or no commit,
    unchanged."""
    base, sep, cls = source.rpartition("::") if "::" in source else (source, "", "")
    if commit and base.startswith("git:") and "@" in base:
        return base.rsplit("@", 1)[0] + "@" + commit + sep + cls
    return source


#: A variant's name in ``NAME=SOURCE``: short, no '/', no '=' (so it is never a path or a
#: version pin; ``vllm==0.32.0`` has no name, ``base=vllm==0.32.0`` is named ``base``).
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]{0,39}$")


def split_name(text: str) -> tuple[str | None, str]:
    """Split ``"NAME=SOURCE"`` into ``("NAME", "SOURCE")``; ``(None, text)`` when unnamed.

    A text that is an existing file is never split (a file may be called ``a=b.py``).
    """
    name, sep, rest = text.partition("=")
    named = sep and rest and not rest.startswith("=") and _NAME_RE.match(name)
    if named and not Path(text).is_file():
        return name, rest
    return None, text


#: What a pool variant's label starts with: a pool of ``vllm==0.33.0`` and that
#: release's queue are two subjects, never one comparison in the report.
POOL_LABEL_PREFIX = "pool:"
#: What a manager variant's label starts with.
MANAGER_LABEL_PREFIX = "manager:"
SUBJECT_LABEL_PREFIX = {
    SUBJECT_QUEUE: "",
    SUBJECT_POOL: POOL_LABEL_PREFIX,
    SUBJECT_MANAGER: MANAGER_LABEL_PREFIX,
}


def is_pool_label(label: object) -> bool:
    """Whether a variant or version label is a ``BlockPool``'s (:data:`POOL_LABEL_PREFIX`)."""
    return str(label).startswith(POOL_LABEL_PREFIX)


def subject_of_label(label: object) -> str:
    """The subject a variant or version label belongs to, by its prefix
    (:data:`SUBJECT_LABEL_PREFIX`): ``pool:...`` -> :data:`SUBJECT_POOL`, ``manager:...``
    -> :data:`SUBJECT_MANAGER`, any other label -> :data:`SUBJECT_QUEUE`."""
    text = str(label)
    for subject, prefix in SUBJECT_LABEL_PREFIX.items():
        if prefix and text.startswith(prefix):
            return subject
    return SUBJECT_QUEUE


def variant_labels(sources: list[str], prefix: str = "") -> list[str]:
    """Return unique labels: ``prefix`` and the ``NAME=`` of a named source, else the
    source string; a source listed again (an A/A pair) gets ``#2``, ``#3``, ..."""
    seen: dict[str, int] = {}
    labels = []
    for text in sources:
        name, source = split_name(text)
        label = prefix + (name or source)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return labels


# ------------------------------------------------------------------ samples.csv floats

#: Decimals of every float in ``samples.csv`` (only ``ns_per_cycle``): a thousandth of a
#: nanosecond is far below the noise (about 1 % of ~100 ns), and a fixed format keeps the
#: files small and diffable.
SAMPLE_FLOAT_DECIMALS = 3
#: Relative tolerance of the reader's ``ns_per_cycle == ns_total / (loops *
#: ops_per_loop)`` check. Far above the rounding error (5e-4 ns on >= 10 ns cycles is
#: < 5e-5 relative), so it only catches a swapped or corrupted column.
NS_PER_CYCLE_RTOL = 1e-3


def format_sample_float(value: float) -> str:
    """Write one ``samples.csv`` float (see :data:`SAMPLE_FLOAT_DECIMALS`)."""
    if not math.isfinite(value):
        raise ValueError(f"samples.csv takes finite numbers only, got {value!r}")
    return f"{value:.{SAMPLE_FLOAT_DECIMALS}f}"


# ------------------------------------------------------------------ ordering


def case_family(case: str) -> str | None:
    """The sized family ``case`` is spelled in (``alloc`` for ``alloc500``, and for a
    misspelled ``alloc0`` too), or None."""
    for families in SIZED_FAMILIES.values():
        for family in families:
            if case.startswith(family):
                return family
    return None


def case_size(case: str, family: str | None = None) -> int | None:
    """N of a sized case ``<family>N`` (any N >= 1: ``alloc500`` -> 500), or None for
    any other text: a fixed case, another family than ``family`` (when given), an N that
    is 0, signed, not decimal digits (ASCII), has a leading zero or more than 9 digits.

    The one parser of N of every subject (:data:`SIZED_FAMILIES`)."""
    found = case_family(case)
    if found is None or (family is not None and found != family):
        return None
    digits = case[len(found) :]
    return int(digits) if _SIZE_RE.fullmatch(digits) else None


def subject_of_case(case: str) -> str | None:
    """The subject whose case ``case`` is (a sized case of any N), or None."""
    for subject in SUBJECTS:
        if is_case(subject, case):
            return subject
    return None


def is_case(subject: str, case: str) -> bool:
    """Whether ``case`` is a case of ``subject``: one of its fixed cases, or
    ``<family>N`` of one of its sized families with N >= 1."""
    if case in FIXED_CASES.get(subject, ()):
        return True
    family = case_family(case)
    return family in SIZED_FAMILIES.get(subject, ()) and case_size(case) is not None


def case_forms(subject: str) -> str:
    """The cases of ``subject`` in words: ``alloc<N> popleft<N> mix popappend remove``."""
    return " ".join([*(f"{f}<N>" for f in SIZED_FAMILIES[subject]), *FIXED_CASES[subject]])


def case_problem(subject: str, case: str) -> str | None:
    """Why ``case`` is not a case of ``subject``, as the end of a one-line refusal
    (None when it is one): a misspelled N, another subject's case, or the choices."""
    if is_case(subject, case):
        return None
    family = case_family(case)
    other = subject_of_case(case)
    if other is not None:
        return f"it is a case of subject {other} (SUBJECT={other})"
    if family in SIZED_FAMILIES.get(subject, ()):
        return (
            f"N of {family}<N> is a whole number from 1 to 999999999 in digits, without a "
            f"sign or leading zero (e.g. {family}500)"
        )
    return f"choose from {case_forms(subject)} (N >= 1)"


def unknown_cases(subject: str, cases: Sequence[str]) -> str | None:
    """The one-line refusal of the cases among ``cases`` that are not ``subject``'s
    (the first one's reason), or None when every one is."""
    unknown = [c for c in cases if not is_case(subject, c)]
    if not unknown:
        return None
    return (
        f"unknown case(s) {', '.join(unknown)} of subject {subject}: "
        f"{unknown[0]}: {case_problem(subject, unknown[0])}"
    )


def case_rank(case: str) -> int:
    """Table order of ``case``: its family's or fixed case's place in :data:`CASE_ORDER`,
    then N within a sized family (``alloc500`` after ``alloc32``, before ``popleft1``);
    unknown cases sort after all known ones."""
    size = case_size(case)
    name = case_family(case) if size is not None else case
    if name not in CASE_ORDER:
        return len(CASE_ORDER) * _RANK_STEP
    return CASE_ORDER.index(name) * _RANK_STEP + (size or 0)


def case_key(case: str) -> tuple[int, str]:
    """Sort key: schema order first, then the name (stable for unknown cases)."""
    return (case_rank(case), case)


# ------------------------------------------------------------------ processed tables

#: pandas dtypes used by :data:`PROCESSED_TABLES` (strings, so pandas is not imported).
STRING, INT, FLOAT, BOOL = "string", "Int64", "float64", "boolean"
#: Enough digits to re-derive every statistic; one fixed format keeps the files stable.
PROCESSED_FLOAT_FORMAT = "%.9g"
#: A *cell*: the context of one comparison.
CELL = ("host", "interpreter", "run_id", "phase", "case", "pool")
#: A *comparison*: candidate vs baseline; ``kind`` is ``"pair"`` or ``"aa"``.
COMPARISON = ("candidate", "baseline", "kind")
_CELL_SPEC = {
    "host": STRING,
    "interpreter": STRING,
    "run_id": STRING,
    "phase": STRING,
    "case": STRING,
    "pool": INT,
}
_CMP_SPEC = {"candidate": STRING, "baseline": STRING, "kind": STRING}
_S, _I, _F, _B = STRING, INT, FLOAT, BOOL
#: Column order and dtype of every processed table (``data/processed/<name>.csv``).
PROCESSED_TABLES: dict[str, dict[str, str]] = {
    "runs": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "status": _S,
        "included": _B,
        "headline": _B,
        "note": _S,
        "integrity": _S,  # sealed | unsealed (...) | altered: <why> (kvqueue.rawdata.integrity)
        "git_state": _S,  # committed | modified | untracked | no git (kvqueue.rawdata.git_state)
        "protocol": _S,  # full | quick (smoke run) | too few processes | reduced (...)
        "warnings": _S,  # host label on several CPU models; a release with two digests
        "schema_version": _I,  # the run's raw-data format (older runs keep theirs)
        "precision_target": _F,  # PRECISION in pp (missing: a run from before the target)
        "sizing_wanted": _I,  # main processes the target asked for after the pilot
        "sizing_capped_by": _S,  # max_processes | max_minutes | no precision target
        "epochs": _I,  # layout epochs per process (1 before EPOCHS existed)
        "make_args": _S,  # JSON [[VAR, text], ...]: params.make_assignments of the run
        "started_at": _S,
        "ended_at": _S,
        "python_implementation": _S,
        "python_version": _S,
        "python_tag": _S,
        "python_build": _S,
        "python_compiler": _S,
        "python_executable": _S,
        "hostname": _S,
        "cpu_model": _S,
        "cpu_count": _I,
        "kernel": _S,
        "platform": _S,
        "governor": _S,
        "load_avg_start": _S,
        "load_avg_end": _S,
        "baseline": _S,
        "block_source": _S,
        "processes": _I,
        "confirm_processes": _I,
        "samples": _I,
        "sample_ms": _F,
        "warmup_ms": _F,
        "pools": _S,
        "cases": _S,
        "confirm_cases": _S,
        "cpu": _S,
        "gc": _S,
        "run_seed": _S,
        "quick": _B,
        "aa": _B,
        "processes_planned_main": _I,
        "processes_planned_confirm": _I,
        "processes_completed_main": _I,
        "processes_completed_confirm": _I,
        "pinned_processes": _I,
        "gates_passed": _I,
        "commit": _S,
        "dirty": _B,
        "n_samples": _I,
    },
    "variants": {
        "host": _S,
        "run_id": _S,
        "position": _I,
        "label": _S,
        "source": _S,
        "commit": _S,  # the commit a git:REPO@REF source resolved to (missing otherwise)
        "class_name": _S,
        "vllm_version": _S,
        "class_sha256": _S,
        "file_sha256": _S,
        "release_check": _S,  # consistent | conflict: ... (same release, other digest)
        "block_source": _S,
        "block_class_sha256": _S,
        "is_bound": _B,
        "gate_ok": _B,
        "gate_ops_checked": _I,
        "gate_invalid_compared": _I,
    },
    "process_medians": {
        **_CELL_SPEC,
        "variant": _S,
        "process": _I,
        "n_samples": _I,
        "median_ns": _F,
        "mean_ns": _F,
        "cv": _F,
    },
    "ratios": {
        **_CELL_SPEC,
        **_CMP_SPEC,
        "process": _I,
        "baseline_ns": _F,
        "candidate_ns": _F,
        "ratio": _F,
    },
    "summary": {
        **_CELL_SPEC,
        **_CMP_SPEC,
        "headline": _B,
        "n_processes": _I,
        "baseline_ns": _F,
        "candidate_ns": _F,
        "reduction": _F,
        "ci_low": _F,
        "ci_high": _F,
        "ci_method": _S,
        "share_faster": _F,
        "cv_baseline": _F,
        "cv_candidate": _F,
        "verdict": _S,
        "aa_half_width": _F,
    },
    "order_effects": {
        **_CELL_SPEC,
        "headline": _B,
        "n_processes": _I,
        "positions": _I,
        "effect": _F,
        "ci_low": _F,
        "ci_high": _F,
        "headline_half_width": _F,
        "warn": _B,
    },
    "floor_gap": {
        **_CELL_SPEC,
        "candidate": _S,
        "baseline": _S,
        "bound": _S,
        "headline": _B,
        "n_processes": _I,
        "candidate_reduction": _F,
        "bound_reduction": _F,
        "bound_ci_low": _F,
        "bound_ci_high": _F,
        "gap_closed": _F,
        "ci_low": _F,
        "ci_high": _F,
    },
    # Policy runs (kind "policy"; kvqueue.policy.policy_analysis): one row per run, policy, metric.
    "policy": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "variant": _S,
        "headline": _B,  # newest complete run per host x interpreter x variant x regime
        "protocol": _S,  # schema.POLICY_PROTOCOL, or the older protocol (engine steps)
        "regime": _S,  # chat | agentic | custom | trace ("" for the older protocol)
        "age": _S,  # age window in turnovers ("200–300"), "steady", "" (older protocol)
        "age_from": _F,
        "age_to": _F,
        "policy": _S,
        "window": _S,  # window factor; "inf" unbounded; "" for lru
        "threshold": _I,
        "kv_regions": _I,  # KV regions per block that priced the net line (0: older protocol)
        "n_processes": _I,
        "metric": _S,  # a key of kvqueue.policy.policy_analysis.METRICS
        "estimate": _F,
        "ci_low": _F,
        "ci_high": _F,
        "ci_method": _S,
    },
    # History runs (kind "history"; kvqueue.history.history_analysis): one row per run, cell and
    # version, oldest version first (order 0).
    "history": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "headline": _B,  # newest full (else newest) history run per host x interpreter
        "reduced": _S,  # "" for a full history, else what it left out (releases, cases)
        "case": _S,
        "pool": _I,
        "version": _S,  # variant label: vllm==<newest release of the version>
        "order": _I,
        "releases": _S,  # "first–last" release that shipped this version
        "first_release": _S,
        "last_release": _S,
        "adapter": _S,  # "" or loader.ADAPTER_POPLEFT_LOOP
        "n_processes": _I,
        "ns": _F,  # median over processes of the per-process median ns per cycle
        "ns_low": _F,
        "ns_high": _F,
        "ratio_to_newest": _F,  # median per-process ratio to the run's newest version
        "ratio_low": _F,
        "ratio_high": _F,
    },
    # One row per run, cell and step between consecutive versions.
    "history_steps": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "headline": _B,
        "case": _S,
        "pool": _I,
        "from_version": _S,
        "to_version": _S,
        "release_range": _S,  # "last release of the older -> first of the newer"
        "n_processes": _I,
        "change": _F,  # median per-process ratio newer/older, minus 1 (+ = slower)
        "ci_low": _F,
        "ci_high": _F,
        "p_value": _F,  # exact two-sided sign test of the per-process ratios (median 1)
        # the interval excludes 0 and the cell holds up under Benjamini-Hochberg over its
        # answer's step x cell tests (kvqueue.history.history_analysis)
        "significant": _B,
    },
    # One row per run folder found, whatever its kind (kvqueue.rawdata.run_ledger).
    "ledger": {
        "host": _S,
        "run_id": _S,
        "kind": _S,  # bench | history | policy | unreadable
        "interpreter": _S,
        "status": _S,
        "started_at": _S,
        "use": _S,  # headline | shown | left out
        "reason": _S,
        # What repeats the run (kvqueue.rawdata.run_ledger.make_command): the make target,
        # the interpreter, and JSON [[VAR, text], ...] of every other recorded parameter.
        "make_target": _S,
        "commit": _S,  # the project commit the run was made at (run.json "project")
        "python_executable": _S,
        "make_args": _S,
    },
    # Counts runs (kind "counts"; kvqueue.stats.count_figures): per run, cell and variant.
    "counts": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "question": _S,  # "ab" or "history"
        "case": _S,
        "pool": _I,
        "label": _S,
        "instructions": _F,  # per operation
        "spread": _F,  # |zero2 - zero| per operation: the count's resolution (nan: not made)
        "l1_misses": _F,  # per operation, with CACHE_SIM (else nan)
        "ll_misses": _F,
        "est_cycles": _F,
    },
    # Instruction reduction of each A/B pair, newest A/B counts run per host x interpreter.
    "count_pairs": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "case": _S,
        "pool": _I,
        "candidate": _S,
        "baseline": _S,
        "candidate_instructions": _F,
        "baseline_instructions": _F,
        "instr_reduction": _F,  # 1 - candidate/baseline
        "cycles_reduction": _F,  # the same of estimated cycles (nan without CACHE_SIM)
    },
    # Where the instructions went (where.csv) of the newest A/B counts run per host x
    # interpreter: C functions (instructions), parts and lines (bytecodes) per variant.
    "count_where": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "case": _S,
        "pool": _I,
        "label": _S,
        "kind": _S,  # c | part | line (WHERE_C, WHERE_PART, WHERE_LINE)
        "part": _S,  # line, part: "queue" or a member path
        "name": _S,  # C function, qualified name (line) or the part's file (part)
        "line": _I,  # line: its number; part: its first line
        "ops": _I,
        "value": _I,  # raw: instructions (c), bytecodes (line), lines (part)
        "per_op": _F,  # value / ops (c, line)
        "detail": _S,  # line: specialised instructions; part: sha256 of its text
    },
    # A history counts run's steps: each version against its predecessor.
    "count_steps": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "case": _S,
        "pool": _I,
        "from_version": _S,
        "to_version": _S,
        "release_range": _S,  # the step's label, as history_steps gives it
        "instr_change": _F,  # newer/older - 1 (+ = more instructions), as history_steps
    },
}


# ------------------------------------------------------------------ policy and history runs
# (the files and run.json keys of the two questions' runs, read by their analyze modules)

#: A policy run's rows (kind :data:`KIND_POLICY`), next to its ``run.json``.
POLICY_CSV = "policy.csv"
#: Columns of one policy worker result row: the per-process, per-policy metrics, sums,
#: so the analysis can form any ratio of them (:mod:`kvqueue.policy.policy_worker`).
POLICY_ROW_KEYS = (
    "policy",
    "window",
    "order_position",
    "allocations",
    "blocks",
    "runs",
    "big_allocations",
    "big_blocks",
    "big_runs",
    "big_blocks_in_runs",
    "big_passed_over",
    "big_rank_excess",
    "big_scanned",
    "admitted",
    "completed",
    "prefill_blocks",
    "hit_blocks",
    "ns_total",
    "big_ns_total",
)
#: ``policy.csv`` header: ``process``, then :data:`POLICY_ROW_KEYS` (the older protocol:
#: warm-up and measurement in engine steps; still read, never written).
POLICY_COLUMNS = ("process", *POLICY_ROW_KEYS)
#: A steady-state policy run's rows (``run.json`` ``protocol`` :data:`POLICY_PROTOCOL`):
#: one per process, policy and engine-age window (:mod:`kvqueue.policy.age_windows`).
POLICY_AGE_CSV = "policy_age.csv"
POLICY_PROTOCOL = "steady-state-1"
POLICY_AGE_ROW_KEYS = (
    "policy",
    "window",
    "order_position",
    "window_from",
    "window_to",
    "age_from",
    "age_to",
    "allocations",
    "blocks",
    "big_allocations",
    "big_blocks",
    "big_runs",
    "big_blocks_in_runs",
    "ns_total",
    "big_ns_total",
    "prefill_allocations",
    "prefill_ns_total",
    "reads",
    "read_blocks",
    "descriptors",
    "desc_p50",
    "desc_p90",
    "admitted",
    "hit_blocks",
    "prefill_blocks",
)
#: ``policy_age.csv`` header: ``process``, then :data:`POLICY_AGE_ROW_KEYS`.
POLICY_AGE_COLUMNS = ("process", *POLICY_AGE_ROW_KEYS)
#: ``run.json`` key of a history run's record (kind :data:`KIND_HISTORY`): its versions,
#: newest first, and whether the releases were given.
HISTORY_KEY = "history"


# ------------------------------------------------------------------ counts runs

#: A counts run's rows: one per cachegrind run (``kvqueue.measure.cachegrind``).
COUNTS_CSV = "counts.csv"
#: cachegrind's events; only ``Ir`` without the cache simulation (the others empty).
COUNT_EVENTS = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")
#: ``counts.csv`` header. ``run`` is ``zero`` / ``zero2`` (the variant's layout and
#: warm-up, ``case`` ``*`` for every case; twice: the count's own resolution) or
#: ``target`` (the same plus ``loops`` loops of ``case``); ``per_loop`` is
#: :func:`kvqueue.subjects.queue_cases.ops_per_loop` (0 for a zero run).
COUNT_COLUMNS = ("case", "pool", "label", "run", "loops", "per_loop", *COUNT_EVENTS)
#: run.json key of a counts run's method: valgrind version and options, operations, seed.
COUNTING_KEY = "counting"
#: run.json key saying which question a counts run answers: ``ab`` or ``history``.
QUESTION_KEY = "question"

#: A counts run's record of where the instructions went (``make bench
#: METRIC=instructions``; :mod:`kvqueue.measure.where_run`): written once, at the end of a
#: complete run, and sealed in ``files`` like counts.csv. Runs before it have none.
#: Numbers and names only, never source text: a part's text is named by its file
#: (``where``) and sha256, and read again where a report is built.
WHERE_CSV = "where.csv"
#: ``where.csv`` header. ``kind`` is :data:`WHERE_C` (``name``: a C function; ``value``:
#: its instructions in the target run minus the zero run, raw), :data:`WHERE_PART`
#: (``part``: a part of the variant's own code, ``queue`` or a member path; ``name``:
#: the file its code objects name; ``line``: its first line; ``value``: its lines;
#: ``detail``: the sha256 of its text) or :data:`WHERE_LINE` (``name``: the function's
#: qualified name; ``value``: bytecodes executed at ``line`` of ``part`` over the loops;
#: ``detail``: the specialised instructions run there). ``ops``: the loops' operations.
WHERE_COLUMNS = ("case", "pool", "label", "kind", "part", "name", "line", "ops", "value", "detail")
WHERE_C, WHERE_PART, WHERE_LINE = "c", "part", "line"
#: A fourth kind, :data:`WHERE_FUNC`, in a manager's counts run on an interpreter with
#: the perf trampoline (CPython >= 3.12): ``part`` and ``name`` (qualified name) of a
#: Python function of the variant's code or one of the stream's named calls
#: (``Stream.prefill``; part ""), ``value`` its exclusive instructions over the
#: profiled loops, ``detail`` its inclusive instructions, ``line`` its calls; one row
#: named :data:`WHERE_REST` (part "") sums the other functions' exclusive instructions.
#: Counted with the trampoline, which stops CPython inlining Python calls: higher than
#: the count, used for shares (layers) and per-call figures.
WHERE_FUNC = "func"
#: The ``part`` of a ``func`` row of code compiled from a string: the methods
#: ``dataclasses`` generates for the release's classes (``__eq__``, ``__init__``).
WHERE_GENERATED = "<generated>"
#: The ``name`` of the row summing every C function below :data:`WHERE_MIN_PER_OP`.
WHERE_REST = "(rest)"
#: C functions whose target − zero instructions per operation stay below this (either
#: way) are summed in one :data:`WHERE_REST` row.
WHERE_MIN_PER_OP = 0.1
#: run.json ``counting`` key of the where.csv format (absent: none written).
WHERE_FORMAT_KEY = "where_format"
WHERE_FORMAT = 1


def text_sha256(text: str) -> str:
    """sha256 of a text's UTF-8 bytes (a part of where.csv names its text by it)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
