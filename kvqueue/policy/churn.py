"""A seeded serving-like churn workload over one free-block queue (docs/design.md §12).

It fragments the free queue the way a serving engine does, so that allocation policies
can be compared on a realistic queue state:

- a closed loop of ``concurrency`` requests: whenever fewer are active, the next request
  of the stream is admitted if its blocks fit (first come, first served);
- each request is one *prefill* allocation of ``L`` blocks (lognormal, median
  ``prefill_median``, log-SD ``prefill_sigma``, at most ``prefill_max``), then *decode*
  growth of one block every ``decode_every`` steps until it has grown by ``D`` blocks
  (lognormal, median ``decode_median``, log-SD ``decode_sigma``, at most ``decode_max``);
- on completion its blocks are freed in vLLM's order: reversed, and only those whose
  reference count drops to zero, with one ``append_n``, so the tail of a request's
  chain is evicted first;
- *prefix-cache hits*: a share ``prefix_share`` of the requests belongs to one of
  ``families`` prompt families (Zipf weights 1/k); each family has a fixed prefix of up
  to ``prefill_median`` blocks. The blocks that computed a family's prefix stay cached
  while they are not evicted (popped by an allocation); a request of that family reuses
  the still-cached part: blocks in use are shared (reference count + 1), free ones are
  taken out of the middle of the queue with ``remove()``. It then allocates only the
  rest of its prefill (at least one block: the last token is always recomputed);
- admission keeps room for the decode growth of every active request, so a decode
  allocation never fails: a request is admitted only if the free blocks left after its
  prefill cover the remaining growth of all active requests and its own;
- ``warmup_steps`` steps run before anything is measured, so that the queue, which
  starts in block-id order (perfectly contiguous), reaches a churned steady state.

The request stream depends on the seed only, never on the policy: every policy sees the
same requests in the same order (a paired comparison). What the policy changes is which
blocks are evicted, and so which cached prefixes survive: the prefix hits (and the
admission times that follow from them) may differ between policies, and
:attr:`Churn.hit_blocks` counts them.

Standard library only: it runs in the bare measured interpreter.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Workload:
    """Parameters of the churn workload (recorded in ``run.json``).

    The defaults model a block size of 16 tokens: prefills of ~770 tokens (median),
    decodes of ~130 tokens, 48 concurrent sessions on a 16,384-block pool, half the
    requests sharing one of 32 prompt prefixes.
    """

    pool: int = 16_384
    concurrency: int = 48
    prefill_median: float = 48.0
    prefill_sigma: float = 1.0
    prefill_max: int = 512
    decode_median: float = 8.0
    decode_sigma: float = 0.8
    decode_max: int = 128
    decode_every: int = 16
    prefix_share: float = 0.5
    families: int = 32
    warmup_steps: int = 2_000
    steps: int = 3_000

    def record(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return asdict(self)

    def problem(self) -> str | None:
        """Why these parameters cannot run (one line), or ``None``."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{f.name} must be a number, got {value!r}"
            if not math.isfinite(value):
                return f"{f.name} must be finite, got {value!r}"
        if self.pool < 64:
            return f"pool must be at least 64 blocks, got {self.pool}"
        if self.concurrency < 1:
            return f"concurrency must be at least 1, got {self.concurrency}"
        if self.prefill_median < 1 or self.decode_median < 1:
            return "prefill_median and decode_median must be at least 1 block"
        if self.prefill_sigma < 0 or self.decode_sigma < 0:
            return "prefill_sigma and decode_sigma must not be negative"
        if self.prefill_max < 1 or self.decode_max < 1 or self.decode_every < 1:
            return "prefill_max, decode_max and decode_every must be at least 1"
        if self.prefill_max + self.decode_max > self.pool // 2:
            return (
                f"prefill_max + decode_max ({self.prefill_max + self.decode_max}) must be at "
                f"most half the pool ({self.pool // 2}): one request could starve the rest"
            )
        if not 0 <= self.prefix_share <= 1:
            return f"prefix_share must be from 0 to 1, got {self.prefix_share}"
        if self.families < 1:
            return f"families must be at least 1, got {self.families}"
        if self.warmup_steps < 0 or self.steps < 1:
            return "warmup_steps must be >= 0 and steps >= 1"
        return None


@dataclass
class Request:
    """One request of the stream and its state once admitted."""

    prefill: int
    decode: int
    family: int  # -1: no shared prefix
    phase: int  # steps until its first decode block, 1..decode_every
    blocks: list[Any]
    next_step: int = 0
    decode_left: int = 0


def _lognormal(rng: random.Random, median: float, sigma: float, top: int) -> int:
    return max(1, min(top, round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))))


class RequestStream:
    """The seeded request stream: the same for every policy (it never sees the queue)."""

    def __init__(self, workload: Workload, seed: int) -> None:
        self.w = workload
        self.rng = random.Random(f"churn:{seed}")
        top = max(1, round(workload.prefill_median))
        self.family_prefix = [self.rng.randint(1, top) for _ in range(workload.families)]
        self.family_weights = [1.0 / (k + 1) for k in range(workload.families)]

    def next(self) -> Request:
        """The next request."""
        w, rng = self.w, self.rng
        prefill = _lognormal(rng, w.prefill_median, w.prefill_sigma, w.prefill_max)
        decode = _lognormal(rng, w.decode_median, w.decode_sigma, w.decode_max)
        family = -1
        if rng.random() < w.prefix_share:
            family = rng.choices(range(w.families), self.family_weights)[0]
        return Request(prefill, decode, family, rng.randint(1, w.decode_every), [])


class Churn:
    """The workload running on one queue; :attr:`alloc` is the allocation under study.

    Parameters
    ----------
    workload
        The parameters.
    seed
        Seed of the request stream.
    queue
        A fresh ``FreeKVCacheBlockQueue`` over ``blocks`` (all free, in id order).
    blocks
        The pool's blocks; ``blocks[i].block_id == i``.
    alloc
        ``alloc(n) -> n blocks`` taken out of ``queue``: the policy (possibly wrapped
        for timing or checks). It may be replaced between steps.
    """

    def __init__(
        self,
        workload: Workload,
        seed: int,
        queue: Any,
        blocks: list[Any],
        alloc: Callable[[int], list],
    ) -> None:
        self.w = workload
        self.queue = queue
        self.blocks = blocks
        self.alloc = alloc
        self.stream = RequestStream(workload, seed)
        self.pending: Request | None = None
        self.active: list[Request] = []
        self.ref = [0] * len(blocks)
        # Prefix cache: which (family, position) a block holds, while it is not evicted.
        self.tag_family = [-1] * len(blocks)
        self.tag_index = [-1] * len(blocks)
        self.chains: list[list[int]] = [[] for _ in range(workload.families)]
        self.step_no = 0
        self.committed = 0  # decode blocks still to come for the active requests
        self.hit_blocks = 0
        self.prefill_blocks = 0
        self.admitted = 0
        self.completed = 0

    # ------------------------------------------------------------------ helpers

    def _take(self, n: int) -> list[Any]:
        got = self.alloc(n)
        for block in got:
            i = block.block_id
            self.ref[i] += 1
            self.tag_family[i] = -1  # evicted: its cached content is overwritten
        return got

    def _cached(self, family: int, want: int) -> list[int]:
        """Ids of the still-cached first blocks of ``family``'s prefix (at most ``want``)."""
        chain = self.chains[family]
        out = []
        for index, block_id in enumerate(chain[:want]):
            if self.tag_family[block_id] != family or self.tag_index[block_id] != index:
                break
            out.append(block_id)
        return out

    def _admit(self, req: Request) -> bool:
        prefix = 0
        hits: list[int] = []
        if req.family >= 0:
            prefix = min(self.stream.family_prefix[req.family], req.prefill - 1)
            hits = self._cached(req.family, prefix)
        free_hits = sum(1 for i in hits if self.ref[i] == 0)
        fresh = req.prefill - len(hits)
        left = self.queue.num_free_blocks - fresh - free_hits
        if left < self.committed + req.decode:
            return False
        for i in hits:
            if self.ref[i] == 0:
                self.queue.remove(self.blocks[i])  # a cached block from mid-queue
            self.ref[i] += 1
        new = self._take(fresh)
        if req.family >= 0 and len(hits) < prefix:
            # This request computes the rest of its family's prefix: cache it.
            chain = hits + [b.block_id for b in new[: prefix - len(hits)]]
            for index in range(len(hits), len(chain)):
                self.tag_family[chain[index]] = req.family
                self.tag_index[chain[index]] = index
            self.chains[req.family] = chain
        req.blocks = [self.blocks[i] for i in hits] + new
        req.next_step = self.step_no + req.phase
        req.decode_left = req.decode
        self.committed += req.decode
        self.hit_blocks += len(hits)
        self.prefill_blocks += req.prefill
        self.admitted += 1
        self.active.append(req)
        return True

    def _free(self, req: Request) -> None:
        ref = self.ref
        freed = []
        for block in reversed(req.blocks):
            i = block.block_id
            ref[i] -= 1
            if ref[i] == 0:
                freed.append(block)
        self.queue.append_n(freed)
        self.completed += 1

    # ------------------------------------------------------------------ stepping

    def step(self) -> None:
        """One engine step: decode growth and completions, then admissions."""
        now = self.step_no
        done = []
        for req in self.active:
            if now >= req.next_step:
                req.blocks.extend(self._take(1))
                req.decode_left -= 1
                self.committed -= 1
                req.next_step += self.w.decode_every
                if req.decode_left == 0:
                    done.append(req)
        for req in done:
            self.active.remove(req)
            self._free(req)
        while len(self.active) < self.w.concurrency:
            if self.pending is None:
                self.pending = self.stream.next()
            if not self._admit(self.pending):
                break
            self.pending = None
        self.step_no += 1

    def run(self, steps: int) -> None:
        """Run ``steps`` steps."""
        for _ in range(steps):
            self.step()
