"""One memory layout of a process of a *stack* subject (the ``BlockPool``, the
``KVCacheManager``): the variants, one instance per variant, case and size, and the case
runners (the stack subjects' :class:`kvqueue.measure.timing_worker.Layout`).

Each variant is a whole stack (its own blocks, queue and hash map), so nothing is shared
between variants: instances are built per variant and size, in a shuffled order with
heap padding between them, as the queue subject builds its queues; the variants are
loaded in a shuffled order too (``pad``: the timing worker's
:func:`kvqueue.measure.timing_worker.heap_padding`, kept alive by it). What differs
between the stack subjects is one :class:`StackKind` each, in :data:`KINDS`.

Standard library only (it runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvqueue.sources import loader, manager_loader, pool_loader
from kvqueue.subjects import manager_api, manager_cases, pool_api, pool_cases
from kvqueue.subjects.queue_cases import Runner


@dataclass(frozen=True)
class StackKind:
    """How one stack subject is loaded, built and driven.

    Attributes
    ----------
    load
        ``(source, label) -> variant`` (its ``sha256`` is what the gate checked).
    api
        ``variant -> adapter``.
    new
        ``(adapter, blocks) -> a fresh instance``, every block free.
    runner
        ``(case, adapter, instance, seed, blocks) -> run(loops) -> ns``.
    cases
        The module of its cases (``ops_per_loop``, ``warmup_ops``, ``target_ops``,
        ``smallest_pool``).
    errors
        What loading or adapting a source raises for a source that cannot be measured.
    first_release
        The oldest release its loader reads.
    """

    load: Callable[[str, str], Any]
    api: Callable[[Any], Any]
    new: Callable[[Any, int], Any]
    runner: Callable[[str, Any, Any, int, int], Runner]
    cases: Any
    errors: tuple[type[Exception], ...]
    first_release: str


KINDS = {
    "pool": StackKind(
        load=pool_loader.load_pool,
        api=lambda v: pool_api.pool_api(v.pool_cls, v.utils),
        new=lambda api, size: api.new_pool(size),
        runner=lambda case, api, pool, seed, size: pool_cases.make_runner(case, api, pool, seed),
        cases=pool_cases,
        errors=(pool_loader.PoolSourceError, pool_api.PoolAPIError, loader.SourceError),
        first_release=pool_loader.FIRST_POOL_RELEASE,
    ),
    "manager": StackKind(
        load=manager_loader.load_manager,
        api=manager_api.manager_api,
        new=lambda api, size: api.new_manager(size),
        runner=manager_cases.make_runner,
        cases=manager_cases,
        errors=(
            manager_loader.ManagerSourceError,
            manager_api.ManagerAPIError,
            loader.SourceError,
        ),
        first_release=manager_loader.FIRST_RELEASE,
    ),
}


class StackCell:
    """The pools of one size: ``timed(runners, label, loops)`` runs a label's runner, as
    :class:`kvqueue.measure.timing_worker.SharedPool` does for queues (each pool is its
    variant's own: there is nothing to hand over)."""

    def __init__(self, pools: dict[str, Any]) -> None:
        self.pools = pools

    @staticmethod
    def timed(runners: dict[str, Runner], label: str, loops: int, last: bool = False) -> int:
        """Run ``label``'s runner for ``loops`` operations; return the ns it took (``last``:
        the queue's, no stack case takes it)."""
        return runners[label](loops)


def load_stacks(spec: dict[str, Any], rng: random.Random, pad: Callable[[], None]) -> list[Any]:
    """Load the spec's variants in a shuffled order with heap padding between them,
    each checked against the digest its gate recorded; returned in label order.

    Raises
    ------
    SystemExit
        A variant changed since the gate (refused in one line).
    """
    sources, labels = spec["sources"], spec["labels"]
    kind = KINDS[spec["subject"]]
    loaded: dict[int, Any] = {}
    for index in rng.sample(range(len(sources)), len(sources)):
        pad()
        loaded[index] = kind.load(sources[index], labels[index])
    variants = [loaded[i] for i in range(len(sources))]
    for variant, label in zip(variants, labels, strict=True):
        want = spec["expected_sha256"].get(label)
        if want is not None and variant.sha256 != want:
            raise SystemExit(
                f"kvqueue worker: {spec['subject']} {label} changed since the validation "
                f"gate (sha256 {variant.sha256[:12]} != {want[:12]}); refusing to time it"
            )
    return variants


class StackLayout:
    """The variants, their pools and the runners of every case × size, built untimed.

    A new layout (a layout epoch) loads and builds everything again: new classes, code
    objects, pools and request scripts at new addresses.
    """

    def __init__(self, spec: dict[str, Any], rng: random.Random, pad: Callable[[], None]) -> None:
        labels = spec["labels"]
        kind = KINDS[spec["subject"]]
        self.variants = load_stacks(spec, rng, pad)
        apis = {label: kind.api(v) for label, v in zip(labels, self.variants, strict=True)}
        self.pools: dict[int, StackCell] = {}
        self.runners: dict[tuple[str, int], dict[str, Runner]] = {}
        for case in spec["cases"]:
            for size in spec["pools"]:
                pools: dict[str, Any] = {}
                runners: dict[str, Runner] = {}
                for label in rng.sample(labels, len(labels)):
                    # One pool per variant, case and size: a case's state (cached blocks,
                    # the free queue's order) never carries into another case.
                    pools[label] = kind.new(apis[label], size)
                    runners[label] = kind.runner(
                        case, apis[label], pools[label], spec["case_seed"], size
                    )
                    pad()
                self.pools.setdefault(size, StackCell({}))
                self.runners[(case, size)] = runners
                self.pools[size].pools.update({f"{case}/{k}": v for k, v in pools.items()})
