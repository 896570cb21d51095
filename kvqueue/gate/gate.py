"""The validation gate (docs/design.md §3): nothing is timed until every variant passes.

1. *Model check*: each variant runs a long seeded sequence of random valid operations
   against a plain Python list model; after EVERY operation the whole structure is
   compared: order, count, forward and backward links, sentinels, detached blocks,
   ``get_all_free_blocks`` and ``iter_blocks_after``. These queues are small (at most
   40 blocks + 12 spares) so that edge cases (empty, one block, popping all) are frequent.
2. *Timed sizes*: the model check again, once per queue size that is timed (by default
   the pools of :data:`kvqueue.schema.POOLS` and the smallest pool ``make bench``
   accepts), starting from the full pool in block-id order as the worker builds it, with
   batches of the timed lengths (1, 2, 8, 32 and N of the run's ``allocN``/``popleftN``:
   ``batches``) and up to :data:`kvqueue.gate.size_check.MAX_BATCH`. A variant
   whose behaviour depends on queue length, block id or batch length beyond the small
   queues of part 1 is caught here. The whole-structure check is O(size), so it runs only
   every ``size // 20`` operations and at the end (with ``get_all_free_blocks`` and a
   full ``iter_blocks_after``); after each operation the count, the sentinels and the
   links of every block the operation touched (and of their old and new neighbours) are
   compared with the model.
3. *Invalid operations*: a fixed set of invalid or edge-case calls (pops beyond the free
   count, removing detached blocks, corrupted sentinels, ...) must raise the same
   exception type and message in every candidate as in the baseline, return the same
   value, and leave exactly the same links and count behind.

A failure is reported as the first diverging operation, expected vs got.

The parts live in :mod:`kvqueue.gate.model_check`, :mod:`kvqueue.gate.size_check` and
:mod:`kvqueue.gate.invalid_ops`; this module runs them in order for every variant.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kvqueue.gate.invalid_ops import (
    INVALID_SCENARIOS,
    compare_invalid_shared,
    runs_natively,
    scenario_needs,
)
from kvqueue.gate.model_check import DEFAULT_OPS, DEFAULT_SEED, model_check
from kvqueue.gate.naming import ValidationError
from kvqueue.gate.size_check import DEFAULT_SIZES, SIZE_OPS_DIVISOR, TIMED_BATCHES, size_check
from kvqueue.sources.loader import STRUCTURE_HEAD_TAIL, Variant


@dataclass(frozen=True)
class GateResult:
    """Outcome of the gate for one variant."""

    label: str
    ok: bool
    ops_checked: int
    invalid_compared: int
    sha256: str
    seconds: float
    error: str | None = None
    role: str = "candidate"
    #: Queue sizes whose timed-size run (part 2) passed completely, in the order run.
    sizes: tuple[int, ...] = ()
    #: Operations of part 2 that passed, over all sizes.
    size_ops_checked: int = 0
    #: Seconds spent in part 2 (included in ``seconds``).
    size_seconds: float = 0.0
    #: The variant's adapter (``loader.ADAPTER_POPLEFT_LOOP``) or None.
    adapter: str | None = None
    #: Invalid-operation scenarios not compared (no variant shares them).
    invalid_skipped: int = 0
    #: Labels of the variants the compared scenarios were compared with (empty when
    #: that was the baseline alone).
    invalid_references: tuple[str, ...] = ()
    #: What the gate skipped or ran through an adapter, one sentence each.
    skipped: tuple[str, ...] = ()
    #: With ``invalid="record"``: the first line of each differing scenario.
    invalid_differs: tuple[str, ...] = ()
    #: The queue size whose timed-size run (part 2) failed, or None: ``sizes`` lists
    #: only the sizes passed, so a summary without it named the wrong size.
    failed_size: int | None = None
    #: Batch lengths of part 2 beyond the default ones (N of the run's ``allocN`` and
    #: ``popleftN``), in order.
    batches: tuple[int, ...] = ()

    def line(self) -> str:
        """One human-readable line, as printed by ``python -m kvqueue validate``."""
        status = "PASS" if self.ok else "FAIL"
        invalid = {
            "baseline": f"{self.invalid_compared} invalid ops (reference)",
            "bound": "invalid ops skipped (bound)",
        }.get(self.role, f"{self.invalid_compared} invalid ops compared")

        sized = sizes_summary(self.size_ops_checked, self.sizes, self.failed_size, self.batches)
        return (
            f"{status}  {self.label:<16} {self.ops_checked:>7,} ops checked  {sized:<34} "
            f"{invalid:<32} sha256 {self.sha256}  {self.seconds:5.1f} s"
        )

    def notes(self) -> list[str]:
        """What was skipped or adapted (printed under :meth:`line`), one line each."""
        notes = [f"note: {n}" for n in self.skipped]
        if self.role == "candidate" and self.invalid_references:
            notes.append(f"note: invalid ops compared with {', '.join(self.invalid_references)}")
        notes += [f"differs (recorded, not refused): {d}" for d in self.invalid_differs]
        return notes


def gate(
    variants: list[Variant],
    ops: int = DEFAULT_OPS,
    seed: int = DEFAULT_SEED,
    sizes: Sequence[int] = DEFAULT_SIZES,
    size_ops: int | None = None,
    invalid: str = "refuse",
    batches: Sequence[int] = (),
) -> list[GateResult]:
    """Run the whole gate; the first variant is the baseline.

    Per variant: the small-queue model check, the invalid-operation comparison
    (candidates only), then the model check at every size of ``sizes``. The cheap parts
    run first, so a variant they refuse costs no time at 100,000 blocks.

    Parameters
    ----------
    variants
        Loaded variants, baseline first.
    ops
        Random operations per variant in the small-queue model check.
    seed
        Seed of the model checks.
    sizes
        Queue sizes of the timed-size model check (each >= 1); the default covers every
        timed pool and the smallest accepted one. Empty skips that part.
    size_ops
        Random operations per size; None means ``ops // SIZE_OPS_DIVISOR``.
    invalid
        ``"refuse"`` (a candidate that differs on an invalid operation is refused) or
        ``"record"`` (a release history: the differences are recorded in
        ``GateResult.invalid_differs``; releases changed their contract on invalid
        use, e.g. 0.10.0 and 0.20.0 leave different counts after ``append_n`` on a
        corrupted tail sentinel).
    batches
        Batch lengths the run times besides the default ones (N of its ``allocN`` and
        ``popleftN``): part 2 pops and gives back that many blocks at every size
        (:func:`kvqueue.gate.size_check.size_check`).

    Returns
    -------
    list of GateResult
        One per variant, in order; ``ok`` is False for a refused variant, and ``sizes``
        lists the sizes it passed.

    Raises
    ------
    ValueError
        A size is not a whole number >= 1 (before anything runs).
    """
    sizes = tuple(sizes)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"queue sizes must be whole numbers >= 1, got {size!r}")
    per_size = ops // SIZE_OPS_DIVISOR if size_ops is None else size_ops
    extra = tuple(sorted({int(b) for b in batches} - set(TIMED_BATCHES)))
    if any(b < 1 for b in extra):
        raise ValueError(f"batch lengths must be whole numbers >= 1, got {list(batches)!r}")
    results = []
    baseline = variants[0]
    for index, variant in enumerate(variants):
        role = "baseline" if index == 0 else "bound" if variant.is_bound else "candidate"
        start = time.perf_counter()
        checked = compared = sized_ops = invalid_skipped = 0
        references: tuple[str, ...] = ()
        differs: tuple[str, ...] = ()
        skipped_by: dict[str, int] = {}
        sized_seconds = 0.0
        covered: list[int] = []
        error = None
        phase = "model"
        try:
            checked = model_check(variant, ops, seed)
            phase = "invalid"
            if role == "baseline":
                needs = [scenario_needs(sc) for sc in INVALID_SCENARIOS]
                compared = sum(runs_natively(variant, n) for n in needs)
                invalid_skipped = len(INVALID_SCENARIOS) - compared
            elif role == "candidate":
                # The baseline first, then every earlier candidate: a scenario the
                # baseline cannot run (another structure, a method it lacks) is compared
                # with the first earlier variant that shares it.
                refs = [baseline, *(v for v in variants[1:index] if not v.is_bound)]
                comparison = compare_invalid_shared(variant, refs, record=invalid == "record")
                compared, references = comparison.compared, comparison.references
                if references == (baseline.label,):
                    references = ()  # the usual case: not worth a note
                differs = comparison.differs
                invalid_skipped = sum(comparison.skipped.values())
                skipped_by = comparison.skipped
            phase = "sizes"
            sized_start = time.perf_counter()
            for size in sizes:
                sized_ops += size_check(variant, size, per_size, seed, extra)
                covered.append(size)
        except ValidationError as exc:
            error = str(exc)
            if phase == "model":
                checked = exc.passed
            elif phase == "sizes":
                sized_ops += exc.passed
        # The sizes are checked in order: the one after the last passed is the one that failed.
        failed_size = sizes[len(covered)] if phase == "sizes" and error is not None else None
        if phase == "sizes":
            sized_seconds = time.perf_counter() - sized_start
        results.append(
            GateResult(
                label=variant.label,
                ok=error is None,
                ops_checked=checked,
                invalid_compared=compared,
                sha256=variant.queue_src.sha256,
                seconds=time.perf_counter() - start,
                error=error,
                role=role,
                sizes=tuple(covered),
                size_ops_checked=sized_ops,
                size_seconds=sized_seconds,
                adapter=variant.adapter,
                invalid_skipped=invalid_skipped,
                invalid_references=references,
                invalid_differs=differs,
                failed_size=failed_size,
                batches=extra,
                skipped=_skipped_notes(variant, role, invalid_skipped, skipped_by),
            )
        )
    return results


def sizes_summary(
    ops: int, passed: Sequence[int], failed: int | None = None, batches: Sequence[int] = ()
) -> str:
    """``+15,002 at sizes 64/4096`` plus ``, batches of 500`` for the run's own batch
    lengths and ``, FAILED at 32,768`` for a size that failed.

    Shared by :meth:`GateResult.line` and the bench's gate lines (built from the JSON
    record).
    """
    out = f"+{ops:,} at sizes {'/'.join(map(str, passed)) or '-'}"
    if batches:
        out += f", batches of {'/'.join(map(str, batches))}"
    return out if failed is None else f"{out}, FAILED at {failed:,}"


def _skipped_notes(
    variant: Variant, role: str, invalid_skipped: int, skipped_by: dict[str, int]
) -> tuple[str, ...]:
    """The gate's parts that did not run, or ran through an adapter, in words."""
    notes = []
    if variant.adapter:
        notes.append(
            f"adapter {variant.adapter}: {', '.join(variant.adapted)} checked as loops of "
            "popleft()/append() (as BlockPool drove the queue before vLLM 0.10.0)"
        )
    if variant.missing:
        notes.append(
            f"the class has no {', '.join(variant.missing)}: the model checks never call "
            "them (no timed case does)"
        )
    if variant.structure == STRUCTURE_HEAD_TAIL:
        notes.append(
            "head-tail structure (free_list_head/free_list_tail, no sentinels): the empty "
            "queue is reached by popping a one-block queue"
        )
    if invalid_skipped and role == "baseline":
        notes.append(
            f"{invalid_skipped} of {len(INVALID_SCENARIOS)} invalid ops cannot run on the "
            "reference itself (no such method, or no sentinels): skipped for every variant"
        )
    elif invalid_skipped:
        why = ", ".join(f"{n} need {k}" for k, n in sorted(skipped_by.items()))
        notes.append(
            f"{invalid_skipped} of {len(INVALID_SCENARIOS)} invalid ops skipped: no "
            f"reference shares them ({why})"
        )
    return tuple(notes)
