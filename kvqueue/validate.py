"""The validation gate (DESIGN §3): nothing is timed until every variant passes.

1. *Model check*: each variant runs a long seeded sequence of random valid operations
   against a plain Python list model; after EVERY operation the whole structure is
   compared: order, count, forward and backward links, sentinels, detached blocks,
   ``get_all_free_blocks`` and ``iter_blocks_after``.
2. *Invalid operations*: a fixed set of invalid or edge-case calls (pops beyond the free
   count, removing detached blocks, corrupted sentinels, ...) must raise the same
   exception type and message in every candidate as in the baseline, return the same
   value, and leave exactly the same links and count behind.

A failure is reported as the first diverging operation, expected vs got.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvqueue.loader import Variant

DEFAULT_OPS = 60_000
DEFAULT_SEED = 20261129
# Small pools make edge cases (empty queue, one block, popping everything) frequent.
_MAX_QUEUE = 40
_MAX_SPARE = 12
_EPISODE_OPS = 400


class ValidationError(AssertionError):
    """A variant broke the contract; the message says where and how.

    ``passed`` counts the model-check operations that passed before the failure.
    """

    def __init__(self, passed: int, message: str) -> None:
        super().__init__(message)
        self.passed = passed

    def __str__(self) -> str:
        return str(self.args[0])


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

    def line(self) -> str:
        """One human-readable line, as printed by ``python -m kvqueue validate``."""
        status = "PASS" if self.ok else "FAIL"
        invalid = {
            "baseline": f"{self.invalid_compared} invalid ops (reference)",
            "bound": "invalid ops skipped (bound)",
        }.get(self.role, f"{self.invalid_compared} invalid ops compared")
        return (
            f"{status}  {self.label:<16} {self.ops_checked:>7,} ops checked  {invalid:<32} "
            f"sha256 {self.sha256}  {self.seconds:5.1f} s"
        )


# --------------------------------------------------------------------------- naming


def _namer(q: Any) -> Callable[[Any], Any]:
    """Return a function naming a block: its id, 'HEAD'/'TAIL' for sentinels, None."""
    head, tail = q.fake_free_list_head, q.fake_free_list_tail

    def name(block: Any) -> Any:
        if block is None:
            return None
        if block is head:
            return "HEAD"
        if block is tail:
            return "TAIL"
        return getattr(block, "block_id", repr(block))

    return name


def _ids(blocks: Any) -> list[Any]:
    return [getattr(b, "block_id", repr(b)) for b in blocks]


# --------------------------------------------------------------------- model check


class _ModelRun:
    """One variant under the randomized differential check."""

    def __init__(self, variant: Variant, rng: random.Random) -> None:
        self.v = variant
        self.rng = rng
        self.op_index = 0
        self.op_desc = ""

    def fail(self, what: str, expected: Any, got: Any) -> None:
        raise ValidationError(
            self.op_index - 1,
            f"operation #{self.op_index} {self.op_desc}: {what}\n"
            f"    expected: {expected!r}\n"
            f"    got:      {got!r}\n"
            f"    model before the operation: {self.model_before}",
        )

    def new_episode(self) -> None:
        rng, block_cls = self.rng, self.v.block_cls
        size = rng.choice([0, 1, 2, 3, rng.randint(4, _MAX_QUEUE)])
        self.blocks = [block_cls(block_id=i) for i in range(size + rng.randint(0, _MAX_SPARE))]
        self.model = rng.sample(self.blocks, size)
        self.model_before = _ids(self.model)
        self.op_desc = f"__init__({len(self.model)} blocks)"
        self.q = self.v.queue_cls(list(self.model))
        self.head, self.tail = self.q.fake_free_list_head, self.q.fake_free_list_tail
        self.check()

    def detached(self) -> list[Any]:
        free = {id(b) for b in self.model}
        return [b for b in self.blocks if id(b) not in free]

    def check(self) -> None:
        """Compare the whole structure with the model."""
        q, model = self.q, self.model
        if q.fake_free_list_head is not self.head or q.fake_free_list_tail is not self.tail:
            self.fail("a sentinel object was replaced", "same sentinels", "new objects")
        if self.head.prev_free_block is not None:
            self.fail("head sentinel has a prev link", None, self.head.prev_free_block)
        if self.tail.next_free_block is not None:
            self.fail("tail sentinel has a next link", None, self.tail.next_free_block)
        name = _namer(q)
        node = self.head.next_free_block
        for pos, want in enumerate(model):
            if node is not want:
                self.fail(f"forward links: block at position {pos}", name(want), name(node))
            node = node.next_free_block
        if node is not self.tail:
            self.fail("forward links: after the last block", "TAIL", name(node))
        node = self.tail.prev_free_block
        for pos in range(len(model) - 1, -1, -1):
            if node is not model[pos]:
                self.fail(f"backward links: block at position {pos}", name(model[pos]), name(node))
            node = node.prev_free_block
        if node is not self.head:
            self.fail("backward links: before the first block", "HEAD", name(node))
        if q.num_free_blocks != len(model):
            self.fail("num_free_blocks", len(model), q.num_free_blocks)
        for b in self.detached():
            if b.prev_free_block is not None or b.next_free_block is not None:
                self.fail(
                    f"block {b.block_id} is not in the queue but its links are not cleared",
                    (None, None),
                    (name(b.prev_free_block), name(b.next_free_block)),
                )

    def step(self) -> None:
        """Run one random valid operation on queue and model, then check."""
        rng, q, model = self.rng, self.q, self.model
        self.model_before = _ids(model)
        spare = self.detached()
        choices = ["get_all", "iter"]
        if model:
            choices += ["popleft", "popleft_n", "popleft_n", "remove", "remove"]
        if spare:
            choices += ["append", "append_n", "append_n", "prepend_n"]
        op = rng.choice(choices)
        self.op_desc = op
        if op == "popleft":
            self.op_desc = "popleft()"
            got = q.popleft()
            want = model.pop(0)
            if got is not want:
                self.fail("popleft() returned", want.block_id, _namer(q)(got))
        elif op == "popleft_n":
            # Mostly small batches (the hot path), sometimes everything, sometimes 0.
            k = rng.choice([0, 1, 1, 2, 2, 3, rng.randint(0, len(model)), len(model)])
            k = min(k, len(model))
            self.op_desc = f"popleft_n({k})"
            got = q.popleft_n(k)
            want, model[:k] = model[:k], []
            if (
                type(got) is not list
                or len(got) != k
                or any(a is not b for a, b in zip(got, want, strict=True))
            ):
                self.fail(
                    "popleft_n returned", _ids(want), got if type(got) is not list else _ids(got)
                )
        elif op == "remove":
            block = rng.choice(model)
            self.op_desc = f"remove(block {block.block_id})"
            q.remove(block)
            model.remove(block)
        elif op == "append":
            block = rng.choice(spare)
            self.op_desc = f"append(block {block.block_id})"
            q.append(block)
            model.append(block)
        elif op in ("append_n", "prepend_n"):
            k = min(len(spare), rng.choice([0, 1, 1, 2, 2, rng.randint(0, len(spare))]))
            batch = rng.sample(spare, k)
            self.op_desc = f"{op}({_ids(batch)})"
            getattr(q, op)(batch)
            if op == "append_n":
                model.extend(batch)
            else:
                model[:0] = batch
        elif op == "get_all":
            self.op_desc = "get_all_free_blocks()"
            got = q.get_all_free_blocks()
            if (
                type(got) is not list
                or len(got) != len(model)
                or any(a is not b for a, b in zip(got, model, strict=True))
            ):
                self.fail("get_all_free_blocks() returned", _ids(model), _ids(got))
        else:
            pos = rng.randint(-1, len(model) - 1)
            cursor = None if pos < 0 else model[pos]
            self.op_desc = f"iter_blocks_after({_namer(q)(cursor)})"
            want = model[pos + 1 :]
            # Bounded: a variant whose iteration never ends must fail, not hang the gate.
            got = list(itertools.islice(q.iter_blocks_after(cursor), len(want) + 2))
            if len(got) != len(want) or any(a is not b for a, b in zip(got, want, strict=True)):
                self.fail("iter_blocks_after yielded", _ids(want), _ids(got))
        self.check()


def model_check(variant: Variant, ops: int = DEFAULT_OPS, seed: int = DEFAULT_SEED) -> int:
    """Run the randomized differential check against a list model.

    Parameters
    ----------
    variant
        The queue under test.
    ops
        Number of random operations (each followed by a full structure check).
    seed
        Seed of the operation sequence (recorded; the same seed gives the same sequence).

    Returns
    -------
    int
        Operations checked.

    Raises
    ------
    ValidationError
        At the first divergence, with the operation index, expected and got.
    """
    run = _ModelRun(variant, random.Random(seed))
    run.model_before = []
    while run.op_index < ops:
        try:
            run.new_episode()
            for _ in range(min(_EPISODE_OPS, ops - run.op_index)):
                run.op_index += 1
                run.step()
        except ValidationError:
            raise
        except Exception as exc:
            # A crash of the variant (e.g. in __init__ or on a missing sentinel) is a
            # refusal like any other divergence, not a crash of the gate.
            run.fail("valid operation raised", "no exception", f"{type(exc).__name__}: {exc}")
    return run.op_index


# ----------------------------------------------------------------- invalid ops


def _scenario_queue(variant: Variant, size: int = 4, spare: int = 2) -> tuple[Any, list[Any]]:
    blocks = [variant.block_cls(block_id=i) for i in range(size + spare)]
    return variant.queue_cls(blocks[:size]), blocks


# Each scenario: (name, queue size, corruption applied before the call, the call).
# ``b`` is the list of all blocks of the scenario: b[:size] start in the queue.
_Scenario = tuple[
    str, int, Callable[[Any, list[Any]], None] | None, Callable[[Any, list[Any]], Any]
]

INVALID_SCENARIOS: list[_Scenario] = [
    ("popleft() on an empty queue", 0, None, lambda q, b: q.popleft()),
    ("popleft_n(5) with 4 free", 4, None, lambda q, b: q.popleft_n(5)),
    ("popleft_n(1) on an empty queue", 0, None, lambda q, b: q.popleft_n(1)),
    ("popleft_n(2) with 1 free", 1, None, lambda q, b: q.popleft_n(2)),
    ("popleft_n(0) on an empty queue", 0, None, lambda q, b: q.popleft_n(0)),
    ("popleft_n(-1)", 3, None, lambda q, b: q.popleft_n(-1)),
    ("remove() of a detached block", 4, None, lambda q, b: q.remove(b[4])),
    (
        "remove() of a half-linked block",
        4,
        lambda q, b: setattr(b[4], "prev_free_block", b[0]),
        lambda q, b: q.remove(b[4]),
    ),
    ("remove() of the head sentinel", 4, None, lambda q, b: q.remove(q.fake_free_list_head)),
    (
        "append() with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append(b[4]),
    ),
    (
        "append_n([1 block]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([b[4]]),
    ),
    (
        "append_n([2 blocks]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([b[4], b[5]]),
    ),
    (
        "append_n([]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([]),
    ),
    (
        "prepend_n([1 block]) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.prepend_n([b[4]]),
    ),
    (
        "prepend_n([]) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.prepend_n([]),
    ),
    (
        "popleft() with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft() on an empty queue whose count says 2",
        0,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft() of a first block without next link",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft_n(1) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(1) of a first block without next link",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) over a broken chain",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) over a broken chain",
        4,
        lambda q, b: setattr(b[1], "next_free_block", None),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft_n(1) with 4 linked but 0 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 0),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) with 4 linked but 1 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 1),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) with 4 linked but 2 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft_n(1) on an empty queue whose count says 2",
        0,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) with 1 linked but 3 counted",
        1,
        lambda q, b: setattr(q, "num_free_blocks", 3),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(4) with 2 linked but 5 counted",
        2,
        lambda q, b: setattr(q, "num_free_blocks", 5),
        lambda q, b: q.popleft_n(4),
    ),
    ("popleft_n(3.0), not an integer", 4, None, lambda q, b: q.popleft_n(3.0)),
    (
        "popleft() on an empty queue with a corrupted head sentinel",
        0,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    # Aliasing: corrupted chains whose links point back into themselves, and blocks
    # appended while still attached. The outcome depends on the order of the stores.
    (
        "popleft_n(1) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(2) whose second block links to itself",
        4,
        lambda q, b: setattr(b[1], "next_free_block", b[1]),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft() of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft_n(1) with a head sentinel linked to itself",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", q.fake_free_list_head),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) whose first block links back to the head",
        4,
        lambda q, b: setattr(b[0], "next_free_block", q.fake_free_list_head),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "append_n() of the last free block",
        4,
        None,
        lambda q, b: q.append_n([b[3]]),
    ),
    (
        "append_n() of the tail sentinel",
        4,
        None,
        lambda q, b: q.append_n([q.fake_free_list_tail]),
    ),
    (
        "append() of the last free block",
        4,
        None,
        lambda q, b: q.append(b[3]),
    ),
    (
        "append_n() of the last free block and another",
        4,
        None,
        lambda q, b: q.append_n([b[3], b[4]]),
    ),
    (
        "remove() of a block linked to itself",
        4,
        lambda q, b: setattr(b[1], "next_free_block", b[1]),
        lambda q, b: q.remove(b[1]),
    ),
    (
        "get_all_free_blocks() with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.get_all_free_blocks(),
    ),
    (
        "iter_blocks_after() a detached cursor",
        4,
        None,
        lambda q, b: list(q.iter_blocks_after(b[4])),
    ),
]


def observe(variant: Variant, scenario: _Scenario) -> dict[str, Any]:
    """Run one invalid-operation scenario; return what happened and the state after.

    The state is every link of every block (sentinels included) and the count, so a
    variant that raises the right error but leaves different partial damage differs.
    """
    _, size, corrupt, call = scenario
    try:
        q, blocks = _scenario_queue(variant, size)
        if corrupt is not None:
            corrupt(q, blocks)
        name = _namer(q)
    except Exception as exc:
        return {"outcome": ("__init__ or setup raised", type(exc).__name__, str(exc))}
    try:
        ret = call(q, blocks)
        outcome: Any = ("returned", [name(r) for r in ret] if isinstance(ret, list) else name(ret))
    except Exception as exc:
        outcome = ("raised", type(exc).__name__, str(exc))
    try:
        links = {
            name(b): (name(b.prev_free_block), name(b.next_free_block))
            for b in [q.fake_free_list_head, q.fake_free_list_tail, *blocks]
        }
        count = q.num_free_blocks
    except Exception as exc:
        links, count = {"unreadable": f"{type(exc).__name__}: {exc}"}, None
    return {"outcome": outcome, "num_free_blocks": count, "links": links}


def compare_invalid(baseline: Variant, candidate: Variant) -> int:
    """Compare every invalid-operation scenario of ``candidate`` with ``baseline``.

    Returns
    -------
    int
        Number of scenarios compared.

    Raises
    ------
    ValidationError
        At the first scenario whose exception, return value or after-state differs.
    """
    for index, scenario in enumerate(INVALID_SCENARIOS, start=1):
        want, got = observe(baseline, scenario), observe(candidate, scenario)
        for key in ("outcome", "num_free_blocks", "links"):
            if want.get(key) != got.get(key):
                detail = key
                if key == "links":
                    keys = list(dict.fromkeys([*want[key], *got[key]]))
                    diff = [k for k in keys if want[key].get(k) != got[key].get(k)]
                    detail = f"links of block(s) {diff} (prev, next)"
                    want_v = {k: want[key].get(k) for k in diff}
                    got_v = {k: got[key].get(k) for k in diff}
                else:
                    want_v, got_v = want.get(key), got.get(key)
                raise ValidationError(
                    0,
                    f"invalid operation {index} '{scenario[0]}': {detail} differs from the "
                    f"baseline\n    expected: {want_v!r}\n    got:      {got_v!r}",
                )
    return len(INVALID_SCENARIOS)


# ----------------------------------------------------------------------- gate


def gate(
    variants: list[Variant], ops: int = DEFAULT_OPS, seed: int = DEFAULT_SEED
) -> list[GateResult]:
    """Run the whole gate; the first variant is the baseline.

    Parameters
    ----------
    variants
        Loaded variants, baseline first.
    ops
        Random operations per variant in the model check.
    seed
        Seed of the model check.

    Returns
    -------
    list of GateResult
        One per variant, in order; ``ok`` is False for a refused variant.
    """
    results = []
    baseline = variants[0]
    for index, variant in enumerate(variants):
        role = "baseline" if index == 0 else "bound" if variant.is_bound else "candidate"
        start = time.perf_counter()
        checked = compared = 0
        error = None
        try:
            checked = model_check(variant, ops, seed)
            if role == "baseline":
                compared = len(INVALID_SCENARIOS)
            elif role == "candidate":
                compared = compare_invalid(baseline, variant)
        except ValidationError as exc:
            error = str(exc)
            checked = checked or exc.passed
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
            )
        )
    return results
