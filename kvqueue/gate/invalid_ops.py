"""Part 3 of the gate: invalid operations compared with a reference (docs/design.md §3).

A fixed set of invalid or edge-case calls (pops beyond the free count, removing detached
blocks, corrupted sentinels, ...) must raise the same exception type and message in every
candidate as in the baseline (or the first earlier variant that shares the scenario),
return the same value, and leave exactly the same links and count behind.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvqueue.gate.naming import LINKS, ValidationError, ends, expected_got, namer
from kvqueue.sources.loader import QUEUE_METHODS, STRUCTURE_HEAD_TAIL, Variant


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


QUEUE_METHOD_NAMES = frozenset(QUEUE_METHODS)
_SENTINEL_ATTRS = frozenset({"fake_free_list_head", "fake_free_list_tail"})


#: A scenario that starts from ``__init__([])``: a head-tail queue cannot be built empty,
#: so it would only compare two identical setup errors.
EMPTY_INIT = "empty-init"


def scenario_needs(scenario: _Scenario) -> frozenset[str]:
    """What a scenario uses: the queue methods it calls (read from the names its two
    functions' code refers to), ``sentinels`` if it touches one, and :data:`EMPTY_INIT`
    if its queue starts empty."""
    names: set[str] = set()
    for fn in scenario[2:]:
        if fn is not None:
            names |= set(fn.__code__.co_names)
    needs = {n for n in names if n in QUEUE_METHOD_NAMES}
    if names & _SENTINEL_ATTRS:
        needs.add("sentinels")
    if scenario[1] == 0:
        needs.add(EMPTY_INIT)
    return frozenset(needs)


def runs_natively(variant: Variant, needs: frozenset[str]) -> bool:
    """Whether ``variant`` has every method of ``needs`` itself (not adapted) and, if
    ``needs`` holds ``sentinels``, sentinel blocks."""
    if variant.structure == STRUCTURE_HEAD_TAIL and needs & {"sentinels", EMPTY_INIT}:
        return False
    return all(variant.has(m) for m in needs if m not in ("sentinels", EMPTY_INIT))


def _shares(reference: Variant, candidate: Variant, needs: frozenset[str]) -> bool:
    """Whether the two can be compared on a scenario: same structure, both native."""
    return (
        reference.structure == candidate.structure
        and runs_natively(reference, needs)
        and runs_natively(candidate, needs)
    )


def observe(variant: Variant, scenario: _Scenario) -> dict[str, Any]:
    """Run one invalid-operation scenario; return what happened and the state after.

    The state is every link of every block (sentinels included) and the count, so a
    variant that raises the right error but leaves different partial damage differs.
    A head-tail queue has no sentinels: its ``free_list_head`` / ``free_list_tail``
    take their place in the state.
    """
    _, size, corrupt, call = scenario
    try:
        q, blocks = _scenario_queue(variant, size)
        if corrupt is not None:
            corrupt(q, blocks)
        head, tail = ends(variant, q)
        name = namer(q, head, tail)
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
            for b in [x for x in (head, tail) if x is not None] + blocks
        }
        if head is None:
            links["free_list_head, free_list_tail"] = (
                name(q.free_list_head),
                name(q.free_list_tail),
            )
        count = q.num_free_blocks
    except Exception as exc:
        links, count = {"unreadable": f"{type(exc).__name__}: {exc}"}, None
    return {"outcome": outcome, "num_free_blocks": count, "links": links}


@dataclass(frozen=True)
class InvalidComparison:
    """What part 3 did for one candidate.

    Attributes
    ----------
    compared
        Scenarios compared.
    references
        Label of the variant each compared scenario was compared with, deduplicated.
    skipped
        ``needs -> count`` of the scenarios skipped, e.g. ``{"prepend_n": 2}``:
        the candidate or every possible reference lacks that (or has it only
        through an adapter).
    """

    compared: int
    references: tuple[str, ...]
    skipped: dict[str, int]
    differs: tuple[str, ...] = ()


def compare_invalid_shared(
    candidate: Variant, references: Sequence[Variant], record: bool = False
) -> InvalidComparison:
    """Compare every scenario ``candidate`` shares with a reference (docs/design.md §3).

    Each scenario is compared with the first of ``references`` (the baseline first)
    that shares it with ``candidate``: the same link structure, and every method the
    scenario calls present in both classes themselves (an adapter's loop is not the
    release's operation). A scenario no reference shares is skipped and counted.
    With ``record`` (a release history: releases differ in their contract on invalid
    use, by design) a difference is recorded in ``differs`` instead of raised.

    Raises
    ------
    ValidationError
        At the first compared scenario whose exception, return value or after-state
        differs.
    """
    compared, used, skipped, differs = 0, [], {}, []
    for index, scenario in enumerate(INVALID_SCENARIOS, start=1):
        needs = scenario_needs(scenario)
        reference = next((r for r in references if _shares(r, candidate, needs)), None)
        if reference is None:
            lacking = [
                n
                for n in sorted(needs)
                if not runs_natively(candidate, frozenset({n}))
                or not any(runs_natively(r, frozenset({n})) for r in references)
            ] or ["structure"]
            key = "/".join(lacking)
            skipped[key] = skipped.get(key, 0) + 1
            continue
        versus = "the baseline" if reference is references[0] else reference.label
        try:
            _compare_one(index, scenario, reference, candidate, versus)
        except ValidationError as exc:
            if not record:
                raise
            differs.append(str(exc).splitlines()[0])
        compared += 1
        if reference.label not in used:
            used.append(reference.label)
    return InvalidComparison(compared, tuple(used), skipped, tuple(differs))


def _compare_one(
    index: int,
    scenario: _Scenario,
    reference: Variant,
    candidate: Variant,
    versus: str = "the baseline",
) -> None:
    """Raise :class:`ValidationError` unless both give the same outcome and state."""
    want, got = observe(reference, scenario), observe(candidate, scenario)
    for key in ("outcome", "num_free_blocks", "links"):
        if want.get(key) == got.get(key):
            continue
        detail, fields = key, ""
        if key == "links":
            keys = list(dict.fromkeys([*want[key], *got[key]]))
            diff = [k for k in keys if want[key].get(k) != got[key].get(k)]
            detail, fields = f"links of block(s) {diff}", f"{{block: {LINKS}}}"
            want_v = {k: want[key].get(k) for k in diff}
            got_v = {k: got[key].get(k) for k in diff}
        else:
            want_v, got_v = want.get(key), got.get(key)
        raise ValidationError(
            0,
            f"invalid operation {index} '{scenario[0]}': {detail} differs from {versus}\n"
            + expected_got(want_v, got_v, fields).rstrip("\n"),
        )
