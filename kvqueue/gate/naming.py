"""How the gate names what it compares, and how it reports the first divergence.

The queue's two ends (sentinel blocks, or ``None`` for the head-tail structure), a block's
printable name (its id, ``HEAD``/``TAIL``), :class:`ValidationError`, raised by every
part of the gate (:mod:`kvqueue.gate.model_check`, :mod:`kvqueue.gate.size_check`,
:mod:`kvqueue.gate.invalid_ops`) at the first operation that diverges, and the two lines
that say what was expected and what came (:func:`expected_got`), their fields named.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvqueue.sources.loader import STRUCTURE_HEAD_TAIL, Variant


class ValidationError(AssertionError):
    """A variant broke the contract; the message says where and how.

    ``passed`` counts the model-check operations that passed before the failure.
    """

    def __init__(self, passed: int, message: str) -> None:
        super().__init__(message)
        self.passed = passed

    def __str__(self) -> str:
        return str(self.args[0])


def ends(variant: Variant, q: Any) -> tuple[Any, Any]:
    """The queue's two end markers: its sentinel blocks, or ``(None, None)`` for the
    head-tail structure (whose first block's ``prev`` and last block's ``next`` are None)."""
    if variant.structure == STRUCTURE_HEAD_TAIL:
        return None, None
    return q.fake_free_list_head, q.fake_free_list_tail


def first_last(variant: Variant, q: Any) -> tuple[Any, Any]:
    """The first and last free block (the end markers themselves when empty)."""
    if variant.structure == STRUCTURE_HEAD_TAIL:
        return q.free_list_head, q.free_list_tail
    return q.fake_free_list_head.next_free_block, q.fake_free_list_tail.prev_free_block


def namer(q: Any, head: Any = "sentinels", tail: Any = None) -> Callable[[Any], Any]:
    """Return a function naming a block: its id, 'HEAD'/'TAIL' for sentinels, None."""
    if head == "sentinels":
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


def ids(blocks: Any) -> list[Any]:
    """The blocks' ids (``repr`` of anything without one), in order."""
    return [getattr(b, "block_id", repr(b)) for b in blocks]


#: The fields of a block's two links, as :func:`expected_got` labels a pair of them.
LINKS = "(prev, next)"


def expected_got(expected: Any, got: Any, fields: str = "") -> str:
    """The two lines of a divergence, each naming ``fields`` when the values are tuples
    of them (``(prev, next) expected: (None, None)`` / ``(prev, next) got: (None, 9)``),
    so that a reader does not have to guess which is which."""
    label = f"{fields} " if fields else ""
    return f"    {label}expected: {expected!r}\n    {label}got:      {got!r}\n"
