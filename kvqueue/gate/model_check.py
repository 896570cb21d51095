"""Part 1 of the gate: the randomized model check on small queues (docs/design.md §3).

Each variant runs a long seeded sequence of random valid operations against a plain
Python list model; after EVERY operation the whole structure is compared: order, count,
forward and backward links, sentinels, detached blocks, ``get_all_free_blocks`` and
``iter_blocks_after``. These queues are small (at most 40 blocks + 12 spares) so that
edge cases (empty, one block, popping all) are frequent.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from kvqueue.gate.naming import LINKS, ValidationError, ends, expected_got, first_last, ids, namer
from kvqueue.sources.loader import STRUCTURE_HEAD_TAIL, Variant

DEFAULT_OPS = 60_000
DEFAULT_SEED = 20261129
# Small pools make edge cases (empty queue, one block, popping everything) frequent.
_MAX_QUEUE = 40
_MAX_SPARE = 12
_EPISODE_OPS = 400


class _ModelRun:
    """One variant under the randomized differential check."""

    def __init__(self, variant: Variant, rng: random.Random) -> None:
        self.v = variant
        self.rng = rng
        self.op_index = 0
        self.op_desc = ""

    def fail(self, what: str, expected: Any, got: Any, fields: str = "") -> None:
        raise ValidationError(
            self.op_index - 1,
            f"operation #{self.op_index} {self.op_desc}: {what}\n"
            + expected_got(expected, got, fields)
            + f"    model before the operation: {self.model_before}",
        )

    def new_episode(self) -> None:
        rng, block_cls, v = self.rng, self.v.block_cls, self.v
        size = rng.choice([0, 1, 2, 3, rng.randint(4, _MAX_QUEUE)])
        total = size + rng.randint(0, _MAX_SPARE)
        head_tail = v.structure == STRUCTURE_HEAD_TAIL
        if head_tail and size == 0:
            total = max(total, 1)  # the empty queue is made from a one-block queue
        self.blocks = [block_cls(block_id=i) for i in range(total)]
        self.model = rng.sample(self.blocks, size)
        self.model_before = ids(self.model)
        self.op_desc = f"__init__({len(self.model)} blocks)"
        if head_tail and size == 0:
            # Before 0.10.0 __init__ reads blocks[0]: vLLM never built an empty queue,
            # it emptied one. The empty state is reached the same way here.
            self.op_desc = "__init__(1 block), popleft()"
            self.q = v.queue_cls([self.blocks[0]])
            self.q.popleft()
        else:
            self.q = v.queue_cls(list(self.model))
        self.head, self.tail = ends(v, self.q)
        self.check()

    def detached(self) -> list[Any]:
        free = {id(b) for b in self.model}
        return [b for b in self.blocks if id(b) not in free]

    def check(self) -> None:
        """Compare the whole structure with the model."""
        q, model = self.q, self.model
        if self.head is not None:  # sentinels
            if q.fake_free_list_head is not self.head or q.fake_free_list_tail is not self.tail:
                self.fail("a sentinel object was replaced", "same sentinels", "new objects")
            if self.head.prev_free_block is not None:
                self.fail("head sentinel has a prev link", None, self.head.prev_free_block)
            if self.tail.next_free_block is not None:
                self.fail("tail sentinel has a next link", None, self.tail.next_free_block)
        name = namer(q, self.head, self.tail)
        node, last = first_last(self.v, q)
        for pos, want in enumerate(model):
            if node is not want:
                self.fail(f"forward links: block at position {pos}", name(want), name(node))
            node = node.next_free_block
        if node is not self.tail:
            self.fail("forward links: after the last block", "TAIL", name(node))
        node = last
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
                    LINKS,
                )

    def step(self) -> None:
        """Run one random valid operation on queue and model, then check."""
        rng, q, model = self.rng, self.q, self.model
        self.model_before = ids(model)
        spare = self.detached()
        choices = ["get_all", "iter"] if self.v.can("iter_blocks_after") else ["get_all"]
        if model:
            choices += ["popleft", "popleft_n", "popleft_n", "remove", "remove"]
        if spare:
            choices += ["append", "append_n", "append_n"]
            choices += ["prepend_n"] if self.v.can("prepend_n") else []
        op = rng.choice(choices)
        self.op_desc = op
        if op == "popleft":
            self.op_desc = "popleft()"
            got = q.popleft()
            want = model.pop(0)
            if got is not want:
                self.fail("popleft() returned", want.block_id, namer(q, self.head, self.tail)(got))
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
                    "popleft_n returned", ids(want), got if type(got) is not list else ids(got)
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
            self.op_desc = f"{op}({ids(batch)})"
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
                self.fail("get_all_free_blocks() returned", ids(model), ids(got))
        else:
            pos = rng.randint(-1, len(model) - 1)
            cursor = None if pos < 0 else model[pos]
            self.op_desc = f"iter_blocks_after({namer(q, self.head, self.tail)(cursor)})"
            want = model[pos + 1 :]
            # Bounded: a variant whose iteration never ends must fail, not hang the gate.
            got = list(itertools.islice(q.iter_blocks_after(cursor), len(want) + 2))
            if len(got) != len(want) or any(a is not b for a, b in zip(got, want, strict=True)):
                self.fail("iter_blocks_after yielded", ids(want), ids(got))
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
