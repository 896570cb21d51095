"""The gate for pools: a candidate ``BlockPool`` must behave as the baseline, call by call.

One seeded script of *intents* drives the baseline pool and the candidate in lockstep
(docs/appendix-pool.md): admit a request (look up its cached prefix, ``touch`` the
hits with any null blocks of a sliding window, allocate the rest, cache its full
blocks), slide a request's window (its blocks before a drawn index, last first, are
replaced by the null block in its table and freed as one list, empty when there are
none, as vLLM's sliding-window and chunked-local managers do), finish one
(``free_blocks`` in vLLM's eviction order: the request's last block first, the null
blocks of its table among them, touched or not), exhaust the pool (allocate every free
block, evicting every cached one, then free them), over-allocate (one block more than
is free: ``ValueError``), and ``reset_prefix_cache`` (False while a request holds
blocks). After every call the two pools are compared: the call's result (block ids,
hits, the reset result, the exception type and message), ``num_free_blocks``,
``get_usage``, every block's ``ref_cnt`` (the null block's excepted: vLLM does not
maintain it), every block's hash, the hash map's entries, ``get_cached_block`` for every
label issued so far and the whole free queue in order.

Each pool must also keep the invariants after every call: the queue walks the same
forwards and backwards and holds ``num_free_blocks`` blocks; a block is queued exactly
when its ``ref_cnt`` is 0 (null block excepted, never queued); ``ref_cnt`` equals the
number of live requests holding the block (the script's own ledger, so a leak is caught
even when the baseline leaks too); the hash map and the blocks' hashes agree.

At pool sizes above :data:`FULL_EVERY_CALL_MAX` the O(size) parts (queue order, every
block, the invariants over every block) run after every intent instead of every call;
the blocks a call returned or was given are still compared after every call.

Releases differ by design; such a difference is allowed only when it is *named* for the
pair (:data:`DESIGN_DIFFERENCES`, :func:`design_differences`): its probe must show it on
the two pools (a named difference that does not show is refused: the list is stale), and
the fields it changes are then left out of the call-by-call comparison, which the result
reports. Nothing else is exempt.

A refusal is one line naming the first call that differed (or broke an invariant), the
field, expected and got, the size and the seed.

Standard library only: it runs under the interpreter being measured.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvqueue.sources import stand_ins
from kvqueue.sources.pool_loader import PoolVariant
from kvqueue.sources.versions import version_key
from kvqueue.subjects.pool_api import PoolAPI, PoolAPIError, PoolRequest, pool_api

DEFAULT_SEED = 20_270
#: Sizes checked when none are given: a small pool (edge cases are frequent) and the
#: smaller of the timed sizes; callers pass the timed sizes (e.g. 2,048 and 100,000).
DEFAULT_SIZES = (64, 2_048)
#: Tokens per block (and per hash block).
BLOCK_SIZE = 16
#: Above this many blocks the O(size) comparisons run once per intent, not per call.
FULL_EVERY_CALL_MAX = 4_096
#: Intents per size: enough that every kind occurs many times at 2,048 blocks.
DEFAULT_INTENTS = 300
#: Block visits one size may cost per pool: above it the intents are cut (never below
#: :data:`MIN_INTENTS`), so 100,000 blocks get 30 intents instead of 300.
VISIT_BUDGET = 3_000_000
MIN_INTENTS = 30
#: Every this many intents (and after the last), ``get_cached_block`` for EVERY label
#: issued so far; after each call, for the labels of the request at hand. Every label
#: after every call would be ~4,500 lookups x ~1,000 calls per pool at 2,048 blocks.
CACHED_EVERY = 10
#: Fields of a call's observation, in the order they are compared.
FIELDS = (
    "exception",
    "result",
    "involved",
    "num_free",
    "usage",
    "ref_cnt",
    "block_hash",
    "hash_map",
    "cached",
    "queue",
)


class PoolGateError(AssertionError):
    """A pool differed from the baseline or broke an invariant (one line)."""


@dataclass(frozen=True)
class DesignDifference:
    """A difference by design between two releases' pools, and how to see it.

    Attributes
    ----------
    name
        Its name, as listed for a pair.
    description
        What differs, in words.
    exempt
        The fields (:data:`FIELDS`) it changes, left out of the comparison.
    probe
        A small call sequence on a fresh pool; its result differs between two pools
        that differ in this way.
    newer_from
        The first release with the newer behaviour (release pairs only).
    """

    name: str
    description: str
    exempt: frozenset[str]
    probe: Callable[[PoolAPI], Any]
    newer_from: str


def _probe_free_order(api: PoolAPI) -> Any:
    pool = api.new_pool(20)
    blocks = pool.get_new_blocks(5)
    pool.free_blocks(reversed(blocks))
    return [b.block_id for b in pool.get_new_blocks(5)]


def _probe_usage(api: PoolAPI) -> Any:
    return api.new_pool(16).get_usage()


#: The named differences between releases found so far (docs/appendix-pool.md).
DESIGN_DIFFERENCES: dict[str, DesignDifference] = {
    d.name: d
    for d in (
        DesignDifference(
            name="freed-uncached-to-front",
            description=(
                "freed blocks without a hash go to the front of the free queue (reused "
                "first, LIFO) instead of the back: every later block id, queue order and "
                "which cached blocks survive differ"
            ),
            exempt=frozenset(
                {"result", "involved", "ref_cnt", "block_hash", "hash_map", "cached", "queue"}
            ),
            probe=_probe_free_order,
            newer_from="0.24.0",
        ),
        DesignDifference(
            name="usage-excludes-null",
            description="get_usage divides by num_gpu_blocks - 1 (0.10.0 counted the null block)",
            exempt=frozenset({"usage"}),
            probe=_probe_usage,
            newer_from="0.10.2",
        ),
    )
}


def design_differences(baseline: str | None, candidate: str | None) -> tuple[str, ...]:
    """The named differences of a pair of releases (none unless both are releases).

    Parameters
    ----------
    baseline, candidate
        vLLM versions of the two pools' sources, or None (a git ref, a file).

    Returns
    -------
    tuple of str
        Names in :data:`DESIGN_DIFFERENCES` whose boundary lies between the two.
    """
    if baseline is None or candidate is None:
        return ()
    lo, hi = sorted((version_key(baseline), version_key(candidate)))
    return tuple(
        d.name for d in DESIGN_DIFFERENCES.values() if lo < version_key(d.newer_from) <= hi
    )


@dataclass(frozen=True)
class PoolGateResult:
    """Outcome of the pool gate for one candidate against the baseline."""

    label: str
    ok: bool
    calls: int
    sizes: tuple[int, ...]
    differences: tuple[str, ...]
    exempt: tuple[str, ...]
    seconds: float
    error: str | None = None


# ---------------------------------------------------------------------- the script


@dataclass(frozen=True)
class _Intent:
    kind: str
    rid: str = ""
    labels: tuple[int, ...] = ()
    nulls: int = 0
    full: int = 0


@dataclass
class _Script:
    """Draws intents from the seed and the baseline's state (never the candidate's)."""

    rng: random.Random
    size: int
    next_label: int = 1
    next_rid: int = 0
    families: list[list[int]] = field(default_factory=list)

    def draw(self, live: Sequence[str], num_free: int) -> _Intent:
        roll = self.rng.random()
        if live and roll < 0.32:
            return _Intent("finish", rid=self.rng.choice(sorted(live)))
        if roll < 0.36:
            return _Intent("exhaust", rid=self._rid())
        if roll < 0.39:
            return _Intent("over")
        if roll < 0.42:
            return _Intent("reset")
        cap = max(1, min(40, self.size // 8))
        if live and roll < 0.50:
            # ``full``: the first block the window still needs (those before it go).
            return _Intent("skip", rid=self.rng.choice(sorted(live)), full=self.rng.randint(0, cap))
        n = self.rng.randint(1, cap)
        labels = self._labels(n)
        nulls = self.rng.choice((0, 0, 0, 1, 2))
        full = n if self.rng.random() < 0.7 else n - 1
        return _Intent("admit", rid=self._rid(), labels=labels, nulls=nulls, full=full)

    def _rid(self) -> str:
        self.next_rid += 1
        return f"r{self.next_rid}"

    def _labels(self, n: int) -> tuple[int, ...]:
        """A shared prefix of an earlier request (so hits happen), then new labels."""
        prefix: list[int] = []
        if self.families and self.rng.random() < 0.6:
            family = self.rng.choice(self.families)
            prefix = family[: self.rng.randint(0, min(n, len(family)))]
        fresh = list(range(self.next_label, self.next_label + n - len(prefix)))
        self.next_label += len(fresh)
        labels = prefix + fresh
        self.families.append(labels)
        if len(self.families) > 24:
            self.families.pop(0)
        return tuple(labels)


class _Run:
    """One pool driven by the script, with the script's ledger of who holds what."""

    def __init__(self, label: str, api: PoolAPI, size: int) -> None:
        self.label = label
        self.api = api
        self.pool = api.new_pool(size, enable_caching=True, hash_block_size=BLOCK_SIZE)
        self.null = self.pool.null_block
        self.live: dict[str, list[Any]] = {}
        self.last: dict[str, Any] = {}
        #: The queue walk of the last full observation, reused by the invariants.
        self.walked: tuple[list[int], list[int]] | None = None

    # -- intents: each yields (call, observation of the call's own result) in turn
    def run(self, intent: _Intent) -> Iterable[tuple[str, dict[str, Any], list[Any]]]:
        pool = self.pool
        if intent.kind == "finish":
            blocks = self.live[intent.rid]
            yield from self._call(
                f"free_blocks({intent.rid})", lambda: self._free(intent.rid, blocks), blocks
            )
        elif intent.kind == "exhaust":
            got: list[Any] = self.live.setdefault(intent.rid, [])

            def take() -> list[int]:
                got.extend(pool.get_new_blocks(pool.get_num_free_blocks()))
                return [b.block_id for b in got]

            yield from self._call(f"get_new_blocks(all, {intent.rid})", take, got)
            # Freed in allocation order: the first block allocated is evicted first.
            yield from self._call(
                f"free_blocks({intent.rid})", lambda: self._free(intent.rid, got, False), got
            )
        elif intent.kind == "over":
            yield from self._call(
                "get_new_blocks(free + 1)",
                lambda: pool.get_new_blocks(pool.get_num_free_blocks() + 1),
                [],
            )
        elif intent.kind == "reset":
            yield from self._call("reset_prefix_cache()", pool.reset_prefix_cache, [])
        elif intent.kind == "skip":
            table = self.live[intent.rid]
            removed: list[Any] = []

            def skip() -> None:
                # Back from the window's start to the first null block (the blocks
                # before it went in an earlier slide); the table keeps null blocks that
                # were never touched, freed with the request.
                for i in range(min(intent.full, len(table)) - 1, -1, -1):
                    if table[i] is self.null:
                        break
                    removed.append(table[i])
                    table[i] = self.null
                pool.free_blocks(removed)

            yield from self._call(f"free_blocks({intent.rid} slid out)", skip, removed)
        else:
            yield from self._admit(intent)

    def _free(self, rid: str, blocks: list[Any], reverse: bool = True) -> None:
        """Free a request's blocks (vLLM frees a request's last block first) and drop
        it from the ledger."""
        self.pool.free_blocks(reversed(blocks) if reverse else list(blocks))
        del self.live[rid]

    def _admit(self, intent: _Intent) -> Iterable[tuple[str, dict[str, Any], list[Any]]]:
        pool, api = self.pool, self.api
        hits: list[Any] = []

        def lookup() -> list[int]:
            for label in intent.labels[: intent.full]:
                block = api.get_cached_block(pool, label)
                if block is None:
                    break
                hits.append(block)
            return [b.block_id for b in hits]

        yield from self._call(f"get_cached_block({intent.rid} prefix)", lookup, [])
        window = [self.null] * intent.nulls
        n_new = len(intent.labels) - len(hits)
        if n_new > pool.get_num_free_blocks():
            yield from self._call(f"admit({intent.rid}) refused: not enough free", lambda: None, [])
            return
        touched = window + hits
        # The ledger follows each call as it returns, so the invariants after it hold.
        blocks = self.live.setdefault(intent.rid, [])

        def touch() -> None:
            api.touch(pool, touched)
            blocks.extend(touched)

        yield from self._call(f"touch({intent.rid}: {len(touched)} blocks)", touch, touched)
        new: list[Any] = []

        def allocate() -> list[int]:
            new.extend(pool.get_new_blocks(n_new))
            blocks.extend(new)
            return [b.block_id for b in new]

        yield from self._call(f"get_new_blocks({intent.rid})", allocate, new)
        hashes = [api.block_hash(label) for label in intent.labels]
        request = PoolRequest(intent.rid, hashes, [0] * (BLOCK_SIZE * len(intent.labels)))
        # Window blocks are never cached (vLLM skips null blocks); the request's own
        # blocks are, from the first one not already cached.
        own = hits + new

        def cache() -> None:
            api.cache_full_blocks(pool, request, own, len(hits), intent.full, BLOCK_SIZE)

        yield from self._call(f"cache_full_blocks({intent.rid})", cache, own)

    def _call(
        self, call: str, action: Callable[[], Any], involved: list[Any]
    ) -> Iterable[tuple[str, dict[str, Any], list[Any]]]:
        try:
            result, exception = action(), None
        except Exception as exc:  # the exception is part of the behaviour compared
            result, exception = None, f"{type(exc).__name__}: {exc}"
        yield call, {"exception": exception, "result": result}, involved


# ------------------------------------------------------------------ observations


def _walk(pool: Any, limit: int) -> tuple[list[int], list[int]]:
    """Queue ids from the head forwards and from the tail backwards (cycle-safe).

    A queue with sentinels (0.10.0 on: ``fake_free_list_head``/``_tail``) is walked
    between them; a 0.9.x queue from its first and last real blocks (``free_list_head``/
    ``_tail``, None when empty), whose outer links are None.
    """
    queue = pool.free_block_queue
    if hasattr(queue, "fake_free_list_head"):
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        first, last = head.next_free_block, tail.prev_free_block
    else:
        head = tail = None
        first, last = queue.free_list_head, queue.free_list_tail
    forward, node = [], first
    while node is not None and node is not tail and len(forward) <= limit:
        forward.append(node.block_id)
        node = node.next_free_block
    backward, node = [], last
    while node is not None and node is not head and len(backward) <= limit:
        backward.append(node.block_id)
        node = node.prev_free_block
    return forward, backward[::-1]


def _observe(
    run: _Run, obs: dict[str, Any], involved: list[Any], full: bool, labels: Iterable[int]
) -> None:
    """Add the pool's state to a call's observation: every block when ``full``, else the
    blocks the call involved; ``get_cached_block`` for each of ``labels``."""
    pool, api = run.pool, run.api
    obs["num_free"] = pool.get_num_free_blocks()
    obs["usage"] = round(pool.get_usage(), 12)
    blocks = pool.blocks if full else sorted({id(b): b for b in involved}.values(), key=_id)
    obs["ref_cnt"] = tuple(None if b is run.null else b.ref_cnt for b in blocks)
    label = api.key_label
    obs["block_hash"] = tuple(None if (h := b.block_hash) is None else label(h) for b in blocks)
    if not full:
        obs["involved"] = tuple(b.block_id for b in blocks)
    entries = api.hash_entries(pool)
    if full:
        obs["hash_map"] = tuple(sorted((api.key_label(k), ids) for k, ids in entries.items()))
        forward, backward = _walk(pool, len(pool.blocks))
        obs["queue"] = tuple(forward)
        run.walked = (forward, backward)
    else:
        obs["hash_map"] = len(entries)
    obs["cached"] = tuple((label, _id(api.get_cached_block(pool, label))) for label in labels)


def _id(block: Any) -> Any:
    return None if block is None else block.block_id


def _invariants(run: _Run, full: bool, involved: list[Any]) -> str | None:
    """The first broken invariant of a pool, in words, or None."""
    pool, api = run.pool, run.api
    null = run.null
    # 0.9.0's blocks have no is_null (its pool knows the null block as null_block).
    if not getattr(null, "is_null", True):
        return f"the null block {null.block_id} lost is_null"
    holders: dict[int, int] = {}
    for blocks in run.live.values():
        for b in blocks:
            if b is not null:
                holders[b.block_id] = holders.get(b.block_id, 0) + 1
    checked = pool.blocks if full else [b for b in involved if b is not null]
    for b in checked:
        if b is null:
            continue
        if b.ref_cnt != holders.get(b.block_id, 0):
            return (
                f"block {b.block_id} has ref_cnt {b.ref_cnt} but "
                f"{holders.get(b.block_id, 0)} live request(s) hold it"
            )
    if null.prev_free_block is not None or null.next_free_block is not None:
        return "the null block is linked into the free queue"
    if not full:
        return None
    forward, backward = run.walked or _walk(pool, len(pool.blocks))
    run.walked = None
    if forward != backward:
        return f"the free queue walks {forward[:8]}... forwards but {backward[:8]}... backwards"
    if len(forward) != pool.get_num_free_blocks():
        count = pool.get_num_free_blocks()
        return f"the free queue holds {len(forward)} blocks but num_free_blocks is {count}"
    queued = set(forward)
    if null.block_id in queued:
        return "the null block is in the free queue"
    free = {b.block_id for b in pool.blocks if b is not null and b.ref_cnt == 0}
    if queued != free:
        extra, lost = sorted(queued - free)[:5], sorted(free - queued)[:5]
        return f"queued blocks != blocks with ref_cnt 0 (queued only {extra}, free only {lost})"
    entries = api.hash_entries(pool)
    secondary = getattr(pool, "cached_block_hashes_by_block", {}) or {}
    for key, ids in entries.items():
        for block_id in ids:
            b = pool.blocks[block_id]
            if b.block_hash != key and key not in secondary.get(block_id, ()):
                label = api.key_label(key)
                return f"hash map entry {label} names block {block_id}, whose hash is not it"
    for b in pool.blocks:
        if b.block_hash is not None:
            if b is null:
                return "the null block has a hash"
            if b.block_id not in entries.get(b.block_hash, ()):
                label = api.key_label(b.block_hash)
                return f"block {b.block_id} has hash {label} but the hash map does not list it"
    return None


def _shown(value: Any, other: Any) -> str:
    """A value, cut near its first difference from ``other`` (messages stay one line)."""
    if isinstance(value, tuple | list) and isinstance(other, tuple | list):
        pairs = enumerate(zip(value, other, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(value), len(other)))
        lo = max(0, at - 2)
        part = ", ".join(map(repr, value[lo : at + 3]))
        more = " ..." if at + 3 < len(value) else ""
        return f"[{'... ' if lo else ''}{part}{more}] (len {len(value)}, from index {lo})"
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


# ------------------------------------------------------------------------ the gate


def _check_size(
    base: tuple[str, PoolAPI],
    cand: tuple[str, PoolAPI],
    size: int,
    seed: int,
    intents: int,
    exempt: frozenset[str],
) -> int:
    """Drive both pools at one size; return the calls compared; raise at the first
    difference or broken invariant."""
    intents = max(MIN_INTENTS, min(intents, VISIT_BUDGET // size))
    runs = [_Run(base[0], base[1], size), _Run(cand[0], cand[1], size)]
    script = _Script(random.Random(f"{seed}:{size}"), size)
    per_call = size <= FULL_EVERY_CALL_MAX
    where = f"({size:,} blocks, seed {seed})"
    calls = 0
    for step in range(intents):
        intent = script.draw(list(runs[0].live), runs[0].pool.get_num_free_blocks())
        streams = [iter(r.run(intent)) for r in runs]
        while True:
            got = [next(s, None) for s in streams]
            if got[0] is None and got[1] is None:
                break
            calls += 1
            if got[0] is None or got[1] is None:
                extra = (got[0] or got[1])[0]  # type: ignore[index]
                raise PoolGateError(
                    f"{runs[1].label} differs from {runs[0].label} at call {calls} "
                    f"(intent {step + 1}) {where}: one pool made the extra call {extra}"
                )
            (call_b, obs_b, inv_b), (call_c, obs_c, inv_c) = got  # type: ignore[misc]
            for run, obs, inv in ((runs[0], obs_b, inv_b), (runs[1], obs_c, inv_c)):
                _observe(run, obs, inv, per_call, intent.labels)
                broken = _invariants(run, per_call, inv)
                if broken:
                    raise PoolGateError(
                        f"{run.label} breaks an invariant after call {calls} {call_c} "
                        f"(intent {step + 1}) {where}: {broken}"
                    )
            if call_b != call_c:
                raise PoolGateError(
                    f"{runs[1].label} differs from {runs[0].label} at call {calls} "
                    f"(intent {step + 1}) {where}: made {call_c} where the baseline made {call_b}"
                )
            for name in FIELDS:
                if name in exempt or name not in obs_b:
                    continue
                if obs_b[name] != obs_c[name]:
                    raise PoolGateError(
                        f"{runs[1].label} differs from {runs[0].label} at call {calls} {call_c} "
                        f"(intent {step + 1}) {where}: {name} expected "
                        f"{_shown(obs_b[name], obs_c[name])} got {_shown(obs_c[name], obs_b[name])}"
                    )
        every_label = (step + 1) % CACHED_EVERY == 0 or step + 1 == intents
        if not per_call or every_label:
            for run in runs:
                run.last = {}
                labels = range(1, script.next_label) if every_label else ()
                _observe(run, run.last, [], True, labels)
                broken = _invariants(run, True, [])
                if broken:
                    raise PoolGateError(
                        f"{run.label} breaks an invariant after intent {step + 1} {where}: {broken}"
                    )
            for name in FIELDS:
                a, b = runs[0].last.get(name), runs[1].last.get(name)
                if name not in exempt and a != b:
                    raise PoolGateError(
                        f"{runs[1].label} differs from {runs[0].label} after intent {step + 1} "
                        f"{where}: {name} expected {_shown(a, b)} got {_shown(b, a)}"
                    )
    return calls


def pool_gate(
    baseline: PoolVariant,
    candidate: PoolVariant,
    sizes: Sequence[int] = DEFAULT_SIZES,
    seed: int = DEFAULT_SEED,
    intents: int = DEFAULT_INTENTS,
    differences: Sequence[str] | None = None,
) -> PoolGateResult:
    """Compare a candidate pool with the baseline, call by call, at every size.

    Parameters
    ----------
    baseline, candidate
        Loaded pools (:func:`kvqueue.sources.pool_loader.load_pool`).
    sizes
        ``num_gpu_blocks`` of each check: pass the timed sizes (e.g. 2,048 and 100,000).
    seed
        Seed of the script.
    intents
        Intents per size (each is 1-4 calls).
    differences
        Named differences by design allowed for this pair; by default
        :func:`design_differences` of the two pools' releases (none unless both are
        releases). Each must show on the pair, or the candidate is refused.

    Returns
    -------
    PoolGateResult
        ``ok`` False with ``error`` (one line) at the first difference.
    """
    start = time.perf_counter()
    names = tuple(
        design_differences(baseline.texts.vllm_version, candidate.texts.vllm_version)
        if differences is None
        else differences
    )
    exempt: set[str] = set()
    calls = 0

    def result(error: str | None) -> PoolGateResult:
        return PoolGateResult(
            label=candidate.label,
            ok=error is None,
            calls=calls,
            sizes=tuple(sizes),
            differences=names,
            exempt=tuple(sorted(exempt)),
            seconds=time.perf_counter() - start,
            error=error,
        )

    try:
        apis = (
            pool_api(baseline.pool_cls, baseline.utils),
            pool_api(candidate.pool_cls, candidate.utils),
        )
    except PoolAPIError as exc:
        return result(f"{candidate.label}: {exc}")
    for name in names:
        known = DESIGN_DIFFERENCES.get(name)
        if known is None:
            return result(f"{name} is not a named difference ({', '.join(DESIGN_DIFFERENCES)})")
        seen = [known.probe(api) for api in apis]
        if seen[0] == seen[1]:
            return result(
                f"named difference {name} is listed for {baseline.label} -> {candidate.label} "
                f"but does not show (both give {seen[0]!r}): the list is stale"
            )
        exempt |= known.exempt
    stand_ins.clear_reached()
    for size in sizes:
        try:
            calls += _check_size(
                (baseline.label, apis[0]),
                (candidate.label, apis[1]),
                size,
                seed,
                intents,
                frozenset(exempt),
            )
        except PoolGateError as exc:
            return result(str(exc))
        except Exception as exc:  # a crash in the driver's own calls is a refusal too
            return result(f"{candidate.label} at {size:,} blocks: {type(exc).__name__}: {exc}")
    reached = stand_ins.reached()
    if reached:
        return result(
            f"{candidate.label} reached {', '.join(reached)}, which nothing here stands in "
            "for: its code uses a part of vLLM this loader does not run"
        )
    return result(None)


def gate_records(
    variants: Sequence[PoolVariant], sizes: Sequence[int], seed: int = DEFAULT_SEED
) -> list[dict[str, Any]]:
    """``python -m kvqueue validate --subject pool --json``'s results: one record per
    pool, in the queue gate's shape where the fields mean the same (``ops_checked`` is
    the calls compared, ``sha256`` :attr:`PoolVariant.sha256`, ``provenance`` the pool's),
    every pool checked (not stopped at the first refusal), the baseline against a fresh
    copy of itself."""
    out = []
    for k, variant in enumerate(variants):
        res = pool_gate(variants[0], variant, sizes, seed)
        out.append(
            {
                "subject": "pool",
                "label": variant.label,
                "ok": res.ok,
                "ops_checked": res.calls,
                "invalid_compared": 0,
                "sha256": variant.sha256,
                "seconds": round(res.seconds, 3),
                "error": res.error,
                "role": "baseline" if k == 0 else "candidate",
                "sizes": list(res.sizes) if res.ok else [],
                "differences": list(res.differences),
                "exempt": list(res.exempt),
                "provenance": variant.provenance(),
            }
        )
    return out
