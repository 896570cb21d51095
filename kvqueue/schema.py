"""The raw-data format (DESIGN §6), shared by the writer (runner) and the readers.

``data/raw/<host>/<run-id>/`` holds, write-once:

``run.json``
    One JSON object; keys listed in :data:`RUN_KEYS`. ``status`` is ``"complete"`` only
    when every planned process finished; ``"running"`` (runner died hard),
    ``"interrupted"`` (Ctrl-C) or ``"failed"`` otherwise. Readers leave incomplete runs out.
``samples.csv``
    One row per timed sample, columns :data:`SAMPLE_COLUMNS`:

    - ``process``: 1-based index of the worker process within its phase;
    - ``phase``: ``"main"`` or ``"confirm"`` (the confirmation run);
    - ``case``: one of :data:`CASES`; ``pool``: pool size in blocks;
    - ``variant``: the variant label (source string; ``#2`` marks an A/A duplicate);
    - ``sample``: 0-based sample round; ``order_position``: 0-based position of this
      variant in that round's shuffled order;
    - ``loops``: timed loop iterations; ``ops_per_loop``: units per iteration (100 for
      ``mix``, else 1); ``ns_total``: ``perf_counter_ns`` difference;
    - ``ns_per_cycle`` = ``ns_total / (loops * ops_per_loop)``.
``bench.ipynb``
    The executed bench notebook (papermill record).

Standard library only.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

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
)

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

CASES = ("alloc1", "alloc2", "alloc8", "alloc32", "mix", "popappend", "remove")
CONFIRM_CASES = ("alloc1", "alloc2", "remove")
POOLS = (2048, 100_000)
PHASES = ("main", "confirm")
