"""One memory layout of a pool-subject process: the pool variants, one pool per variant and
size, and the case runners (the pool subject's :class:`kvqueue.measure.timing_worker.Layout`).

Each variant is a whole ``BlockPool`` (its own blocks, queue and hash map), so nothing is
shared between variants: pools are built per variant and size, in a shuffled order with
heap padding between them, as the queue subject builds its queues; the variants are
loaded in a shuffled order too (``pad``: the timing worker's
:func:`kvqueue.measure.timing_worker.heap_padding`, kept alive by it).

Standard library only (it runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvqueue.sources import pool_loader
from kvqueue.subjects import pool_api, pool_cases
from kvqueue.subjects.queue_cases import Runner


class PoolCell:
    """The pools of one size: ``timed(runners, label, loops)`` runs a label's runner, as
    :class:`kvqueue.measure.timing_worker.SharedPool` does for queues (each pool is its
    variant's own: there is nothing to hand over)."""

    def __init__(self, pools: dict[str, Any]) -> None:
        self.pools = pools

    @staticmethod
    def timed(runners: dict[str, Runner], label: str, loops: int) -> int:
        """Run ``label``'s runner for ``loops`` operations; return the ns it took."""
        return runners[label](loops)


def load_pools(
    spec: dict[str, Any], rng: random.Random, pad: Callable[[], None]
) -> list[pool_loader.PoolVariant]:
    """Load the spec's pool variants in a shuffled order with heap padding between them,
    each checked against the digest its gate recorded; returned in label order.

    Raises
    ------
    SystemExit
        A variant changed since the gate (refused in one line).
    """
    sources, labels = spec["sources"], spec["labels"]
    loaded: dict[int, pool_loader.PoolVariant] = {}
    for index in rng.sample(range(len(sources)), len(sources)):
        pad()
        loaded[index] = pool_loader.load_pool(sources[index], labels[index])
    variants = [loaded[i] for i in range(len(sources))]
    for variant, label in zip(variants, labels, strict=True):
        want = spec["expected_sha256"].get(label)
        if want is not None and variant.sha256 != want:
            raise SystemExit(
                f"kvqueue worker: pool {label} changed since the validation gate (sha256 "
                f"{variant.sha256[:12]} != {want[:12]}); refusing to time it"
            )
    return variants


class PoolLayout:
    """The variants, their pools and the runners of every case × size, built untimed.

    A new layout (a layout epoch) loads and builds everything again: new classes, code
    objects, pools and request scripts at new addresses.
    """

    def __init__(self, spec: dict[str, Any], rng: random.Random, pad: Callable[[], None]) -> None:
        labels = spec["labels"]
        self.variants = load_pools(spec, rng, pad)
        apis = {
            label: pool_api.pool_api(v.pool_cls, v.utils)
            for label, v in zip(labels, self.variants, strict=True)
        }
        self.pools: dict[int, PoolCell] = {}
        self.runners: dict[tuple[str, int], dict[str, Runner]] = {}
        for case in spec["cases"]:
            for size in spec["pools"]:
                pools: dict[str, Any] = {}
                runners: dict[str, Runner] = {}
                for label in rng.sample(labels, len(labels)):
                    # One pool per variant, case and size: a case's state (cached blocks,
                    # the free queue's order) never carries into another case.
                    pools[label] = apis[label].new_pool(size)
                    runners[label] = pool_cases.make_runner(
                        case, apis[label], pools[label], spec["case_seed"]
                    )
                    pad()
                self.pools.setdefault(size, PoolCell({}))
                self.runners[(case, size)] = runners
                self.pools[size].pools.update({f"{case}/{k}": v for k, v in pools.items()})
