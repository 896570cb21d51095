"""The validation gate (kvqueue.gate) refuses broken queues and passes correct ones.

The broken queues are *mutants* of the hand-written correct fixture
``tests/queues/good.py``: each applies one or two small, plausible edits to the text of
its ``FreeKVCacheBlockQueue`` (dropping a link reset, an assert, changing a message, ...).
All mutants are written as differently named classes into one generated file, and each
is selected with ``FILE::ClassName``, exactly like a user would select a class.

``SIZE_MUTANTS`` misbehave only at the timed sizes (a count >= 60, a block id >= 1000,
an ``append_n`` of exactly 32 blocks, more than 1,024 free blocks): the gate without its
timed-size part passes them, the gate with it refuses them.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvqueue import schema
from kvqueue.gate import gate, invalid_ops, model_check, naming, size_check
from kvqueue.sources import loader
from kvqueue.subjects import queue_cases

# Smaller than the default so the ~20 gate runs below stay fast; every mutant here is
# caught within the first few hundred operations (or by the invalid-operation table).
QUICK_OPS = 5_000
TAIL_MSG = '"prev_free_block of fake_free_list_tail should always exist"'


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug: ``edits`` are (old, new) text replacements in the good class."""

    name: str
    bug: str
    edits: tuple[tuple[str, str], ...]
    names_op: str  # the gate's error must name this operation


MUTANTS = [
    Mutant(
        "PopleftKeepsLinks",
        "popleft() does not clear the links of the popped block",
        (("        first.prev_free_block = None\n        first.next_free_block = None\n", ""),),
        "popleft()",
    ),
    Mutant(
        "AppendNCountOffByOne",
        "append_n() of 2+ blocks counts one block too few",
        (
            (
                "        self.num_free_blocks += len(blocks)\n\n    def prepend_n",
                "        self.num_free_blocks += len(blocks) - 1\n\n    def prepend_n",
            ),
        ),
        "append_n([",
    ),
    Mutant(
        "PrependNReversed",
        "prepend_n() links the batch in reverse order",
        (
            (
                "        prev = self.fake_free_list_head\n        for block in blocks:",
                "        prev = self.fake_free_list_head\n        for block in reversed(blocks):",
            ),
        ),
        "prepend_n([",
    ),
    Mutant(
        "WrongEmptyMessage",
        "popleft() on an empty queue raises with a different message",
        (('raise ValueError("No free blocks available")', 'raise ValueError("Queue is empty")'),),
        "'popleft() on an empty queue'",
    ),
    Mutant(
        "WrongSyncMessage",
        "the out-of-sync assert of popleft() has a different message",
        (("is out of sync with the free list.", "does not match the free list."),),
        "'popleft() with a corrupted head sentinel'",
    ),
    Mutant(
        "WrongRemoveExceptionType",
        "remove() of a detached block raises ValueError instead of RuntimeError",
        (('raise RuntimeError(f"remove() called', 'raise ValueError(f"remove() called'),),
        "'remove() of a detached block'",
    ),
    Mutant(
        "AppendAssertsInsteadOfRaising",
        "append() with a corrupted tail asserts instead of raising RuntimeError",
        (
            (
                f"        if last is None:\n            raise RuntimeError({TAIL_MSG})\n",
                f"        assert last is not None, {TAIL_MSG}\n",
            ),
        ),
        "'append() with a corrupted tail sentinel'",
    ),
    Mutant(
        "CursorOffByOne",
        "iter_blocks_after(cursor) yields the cursor itself",
        (
            (
                "        curr = start.next_free_block\n        while curr is not None and",
                "        curr = start if cursor is not None else start.next_free_block\n"
                "        while curr is not None and",
            ),
        ),
        "iter_blocks_after(",
    ),
    Mutant(
        "BatchPopForgetsBackLink",
        "popleft_n(k>=2) does not set the back link of the new first block",
        (
            (
                "            self.fake_free_list_head.next_free_block = curr\n"
                "            curr.prev_free_block = self.fake_free_list_head\n",
                "            self.fake_free_list_head.next_free_block = curr\n",
            ),
        ),
        "popleft_n(",
    ),
    Mutant(
        "RemoveKeepsLinks",
        "remove() does not clear the links of the removed block",
        (
            (
                "        block.prev_free_block = None\n        block.next_free_block = None\n"
                "        self.num_free_blocks -= 1\n",
                "        self.num_free_blocks -= 1\n",
            ),
        ),
        "remove(block ",
    ),
    Mutant(
        "PopOneSkipsAssert",
        "the popleft_n(1) fast path skips the n > free assert",
        (("            assert self.num_free_blocks >= 1\n", ""),),
        "'popleft_n(1) on an empty queue'",
    ),
    Mutant(
        "AppendOneIgnoresCorruptTail",
        "the append_n single-block path does not assert on a corrupted tail sentinel",
        (
            (
                f"            assert last is not None, {TAIL_MSG}\n            block = blocks[0]\n",
                "            block = blocks[0]\n",
            ),
        ),
        "'append_n([1 block]) with a corrupted tail sentinel'",
    ),
    Mutant(
        "GetAllIncludesTail",
        "get_all_free_blocks() also returns the tail sentinel",
        (
            (
                "        while curr.next_free_block is not None:\n",
                "        while curr is not None:\n",
            ),
        ),
        "get_all_free_blocks()",
    ),
    Mutant(
        "PopZeroReturnsNone",
        "popleft_n(0) returns None instead of an empty list",
        (
            (
                "        if n == 0:\n            return []\n",
                "        if n == 0:\n            return None\n",
            ),
        ),
        "popleft_n(0)",
    ),
    Mutant(
        "BatchPopCountsLate",
        "popleft_n(k>=3) decrements the count after the loop (different partial state)",
        (
            ("        self.num_free_blocks -= n\n        taken = []\n", "        taken = []\n"),
            ("        return taken\n", "        self.num_free_blocks -= n\n        return taken\n"),
        ),
        "over a broken chain'",
    ),
    Mutant(
        "PopleftSkipsNextCheck",
        "popleft() does not check the next link of the first block",
        (
            (
                "        if second is None:\n            raise RuntimeError(\n",
                "        if second is None and False:\n            raise RuntimeError(\n",
            ),
        ),
        "'popleft() of a first block without next link'",
    ),
    Mutant(
        "AppendForgetsCount",
        "append() does not increase num_free_blocks",
        (
            (
                "        self.fake_free_list_tail.prev_free_block = block\n"
                "        self.num_free_blocks += 1\n\n    def append_n",
                "        self.fake_free_list_tail.prev_free_block = block\n\n    def append_n",
            ),
        ),
        "append(block ",
    ),
    Mutant(
        "AppendForgetsTailBackLink",
        "append() leaves the tail's back link on the old last block",
        (
            (
                "        block.next_free_block = self.fake_free_list_tail\n"
                "        self.fake_free_list_tail.prev_free_block = block\n"
                "        self.num_free_blocks += 1\n\n    def append_n",
                "        block.next_free_block = self.fake_free_list_tail\n"
                "        self.num_free_blocks += 1\n\n    def append_n",
            ),
        ),
        "append(block ",
    ),
    Mutant(
        "PopOneChecksListNotCount",
        "popleft_n(1) asserts that the list is not empty instead of checking the count",
        (
            (
                "            assert self.num_free_blocks >= 1\n",
                "            assert self.fake_free_list_head.next_free_block is not "
                "self.fake_free_list_tail\n",
            ),
        ),
        "'popleft_n(1) with 4 linked but 0 counted'",
    ),
    Mutant(
        "PopOneRelinksBeforeClearing",
        "popleft_n(1) relinks the head before clearing the popped block (differs on a self-loop)",
        (
            (
                "            only.prev_free_block = None\n"
                "            only.next_free_block = None\n"
                "            if after is not None:\n"
                "                self.fake_free_list_head.next_free_block = after\n"
                "                after.prev_free_block = self.fake_free_list_head\n",
                "            if after is not None:\n"
                "                self.fake_free_list_head.next_free_block = after\n"
                "                after.prev_free_block = self.fake_free_list_head\n"
                "            only.prev_free_block = None\n"
                "            only.next_free_block = None\n",
            ),
        ),
        "'popleft_n(1) of a block linked to itself'",
    ),
    Mutant(
        "PrependNEmptyWithoutEarlyReturn",
        "prepend_n([]) checks the head sentinel anyway (asserts on a corrupted head)",
        (("        if not blocks:\n            return\n        old_first", "        old_first"),),
        "'prepend_n([]) with a corrupted head sentinel'",
    ),
]


def good_class_text(good_text: str) -> str:
    start = good_text.index("class FreeKVCacheBlockQueue:")
    end = good_text.index("\n\n\nclass IncompleteQueue")
    return good_text[start:end] + "\n"


def mutate(good_text: str, mutant: Mutant, class_name: str | None = None) -> str:
    """Return the good queue class with ``mutant``'s edits, renamed."""
    text = good_class_text(good_text)
    for old, new in mutant.edits:
        assert text.count(old) == 1, f"{mutant.name}: edit does not apply once: {old!r}"
        text = text.replace(old, new)
    return text.replace("class FreeKVCacheBlockQueue:", f"class {class_name or mutant.name}:")


@pytest.fixture(scope="module")
def broken_file(tmp_path_factory) -> Path:
    """One file: the fixture's KVCacheBlock and every mutant as its own class."""
    good_text = (Path(__file__).parent / "queues" / "good.py").read_text()
    header = good_text[: good_text.index("class FreeKVCacheBlockQueue:")]
    path = tmp_path_factory.mktemp("broken") / "broken.py"
    path.write_text(header + "\n\n".join(mutate(good_text, m) for m in MUTANTS))
    return path


@pytest.fixture(scope="module")
def baseline() -> loader.Variant:
    return loader.load_variants(["kvqueue"])[0]


def load(source: str, baseline: loader.Variant) -> loader.Variant:
    return loader.load_variant(source, (baseline.block_cls, baseline.block_src))


def test_there_are_enough_distinct_mutants(broken_file):
    assert len(MUTANTS) >= 10
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    texts = {loader.read_source(f"{broken_file}::{m.name}").sha256 for m in MUTANTS}
    assert len(texts) == len(MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_gate_refuses_broken_queue(mutant, broken_file, baseline):
    broken = load(f"{broken_file}::{mutant.name}", baseline)
    base_result, result = gate.gate([baseline, broken], ops=QUICK_OPS)
    assert base_result.ok, base_result.error
    assert base_result.role == "baseline"
    assert result.ok is False, f"gate passed a queue where {mutant.bug}"
    assert result.role == "candidate"
    assert result.label == f"{broken_file}::{mutant.name}"
    assert mutant.names_op in result.error, result.error
    assert "expected:" in result.error and "got:" in result.error, result.error
    first = result.error.splitlines()[0]
    assert re.match(r"(operation #\d+ |invalid operation \d+ ')", first), first
    assert result.line().startswith("FAIL")


def test_model_check_failure_reports_index_and_model(broken_file, baseline):
    broken = load(f"{broken_file}::PopleftKeepsLinks", baseline)
    with pytest.raises(naming.ValidationError) as info:
        model_check.model_check(broken, ops=QUICK_OPS)
    message = str(info.value)
    index = int(re.match(r"operation #(\d+) popleft\(\)", message).group(1))
    assert info.value.passed == index - 1
    assert "is not in the queue but its links are not cleared" in message
    assert "model before the operation: [" in message


def test_invalid_op_failure_shows_expected_and_got(broken_file, baseline):
    broken = load(f"{broken_file}::WrongRemoveExceptionType", baseline)
    with pytest.raises(naming.ValidationError) as info:
        invalid_ops.compare_invalid_shared(broken, [baseline])
    message = str(info.value)
    assert "outcome differs from the baseline" in message
    assert "expected: ('raised', 'RuntimeError', 'remove() called on an invalid block:" in message
    assert "got:      ('raised', 'ValueError', 'remove() called on an invalid block:" in message


def test_invalid_op_partial_state_is_compared(broken_file, baseline):
    """Same exception, different damage left behind: refused on the count."""
    broken = load(f"{broken_file}::BatchPopCountsLate", baseline)
    model_check.model_check(broken, ops=2_000)  # valid operations all behave
    with pytest.raises(naming.ValidationError, match="num_free_blocks differs"):
        invalid_ops.compare_invalid_shared(broken, [baseline])


def test_invalid_scenarios_table():
    names = [s[0] for s in invalid_ops.INVALID_SCENARIOS]
    assert len(names) >= 9
    assert len(set(names)) == len(names)


def test_gate_keeps_checking_after_a_refusal(broken_file, baseline):
    """Every variant gets a result; a refusal in the middle does not stop the gate."""
    variants = [
        baseline,
        load(f"{broken_file}::GetAllIncludesTail", baseline),
        load("kvqueue", baseline),
    ]
    results = gate.gate(variants, ops=2_000)
    assert [r.ok for r in results] == [True, False, True]
    assert results[2].invalid_compared == len(invalid_ops.INVALID_SCENARIOS)


def test_gate_refuses_a_queue_whose_constructor_raises(tmp_path, good_text, baseline):
    bad = tmp_path / "bad_init.py"
    bad.write_text(
        good_text.replace(
            "        chain = [self.fake_free_list_head,",
            "        if not blocks:\n            raise TypeError('no blocks')\n"
            "        chain = [self.fake_free_list_head,",
        )
    )
    results = gate.gate([baseline, load(str(bad), baseline)], ops=2_000)
    assert results[1].ok is False
    assert "__init__" in results[1].error


# ---------------------------------------------------------- the real default run


@pytest.fixture(scope="module")
def default_run(good_path_module):
    """Gate at the DEFAULT op count: kvqueue, the good fixture and the floor bound.

    Counts every model-check step and check, and the kinds of operations run.
    """
    calls = Counter()
    kinds = Counter()
    real_step, real_check = model_check._ModelRun.step, model_check._ModelRun.check

    def step(self):
        calls["step", self.v.label] += 1
        real_step(self)
        kinds[self.v.label, re.match(r"[a-z_]+", self.op_desc).group()] += 1

    def check(self):
        calls["check", self.v.label] += 1
        real_check(self)

    variants = loader.load_variants(["kvqueue", str(good_path_module), "kvqueue:floor"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_check._ModelRun, "step", step)
        mp.setattr(model_check._ModelRun, "check", check)
        results = gate.gate(variants)
    return variants, results, calls, kinds


@pytest.fixture(scope="module")
def good_path_module() -> Path:
    return Path(__file__).parent / "queues" / "good.py"


def test_default_op_count_is_at_least_60000(default_run):
    variants, results, calls, _ = default_run
    assert model_check.DEFAULT_OPS >= 60_000
    for variant, result in zip(variants, results, strict=True):
        assert result.ok, result.error
        assert result.ops_checked >= 60_000
        assert calls["step", variant.label] == result.ops_checked
        # A full check after every operation, plus one per fresh queue (episode).
        assert calls["check", variant.label] > result.ops_checked


def test_default_run_exercises_every_operation(default_run):
    variants, _, _, kinds = default_run
    expected = {
        "popleft",
        "popleft_n",
        "remove",
        "append",
        "append_n",
        "prepend_n",
        "get_all_free_blocks",
        "iter_blocks_after",
    }
    for variant in variants:
        seen = {kind for (label, kind), n in kinds.items() if label == variant.label and n > 500}
        assert seen == expected


def test_correct_fixture_queue_passes(default_run):
    _, (base, good, _), _, _ = default_run
    assert base.role == "baseline" and base.ok
    assert base.invalid_compared == len(invalid_ops.INVALID_SCENARIOS)
    assert good.role == "candidate" and good.ok and good.error is None
    assert good.invalid_compared == len(invalid_ops.INVALID_SCENARIOS)
    assert good.line().startswith("PASS")
    assert good.sha256 in good.line()


def test_bound_is_model_checked_but_skips_invalid_ops(default_run):
    variants, results, _, _ = default_run
    floor, result = variants[2], results[2]
    assert floor.is_bound
    assert result.role == "bound"
    assert result.ok, result.error
    assert result.ops_checked == model_check.DEFAULT_OPS
    assert result.invalid_compared == 0
    assert "invalid ops skipped (bound)" in result.line()
    # Skipping matters: the check-free floor would fail the invalid-operation comparison.
    with pytest.raises(naming.ValidationError):
        invalid_ops.compare_invalid_shared(floor, [variants[0]])


def test_broken_bound_is_refused_by_the_model_check(tmp_path, good_text, baseline):
    mutant = next(m for m in MUTANTS if m.name == "BatchPopForgetsBackLink")
    path = tmp_path / "floor.py"
    path.write_text(mutate(good_text, mutant, class_name=loader.FLOOR_CLASS))
    floor = load(f"{path}::{loader.FLOOR_CLASS}", baseline)
    assert floor.is_bound
    result = gate.gate([baseline, floor], ops=QUICK_OPS)[1]
    assert result.role == "bound"
    assert not result.ok
    assert result.error.startswith("operation #") and "popleft_n(" in result.error


# ------------------------------------------------------------------ determinism


def op_sequence(variant: loader.Variant, seed: int, ops: int = 3_000) -> list[str]:
    seen = []
    real_step = model_check._ModelRun.step

    def step(self):
        real_step(self)
        seen.append(self.op_desc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_check._ModelRun, "step", step)
        assert model_check.model_check(variant, ops=ops, seed=seed) == ops
    return seen


def test_same_seed_same_operations(baseline):
    first = op_sequence(baseline, seed=7)
    assert first == op_sequence(baseline, seed=7)
    assert first != op_sequence(baseline, seed=8)
    assert len(set(first)) > 100


def test_same_seed_same_result(broken_file, baseline):
    broken = load(f"{broken_file}::CursorOffByOne", baseline)
    runs = [gate.gate([baseline, broken], ops=QUICK_OPS, seed=s)[1] for s in (11, 11, 12)]
    assert runs[0].error == runs[1].error
    assert runs[0].ops_checked == runs[1].ops_checked
    assert runs[0].error != runs[2].error


# ---------------------------------------------------------------------- the CLI


def test_cli_pass_exit_0(run_cli, good_path):
    proc = run_cli("validate", "kvqueue", str(good_path), "kvqueue:floor", "--ops", "2000")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("validation gate: seed")
    assert "baseline kvqueue" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["PASS"] * 3
    assert "2,000 ops checked" in lines[2]
    assert len(re.findall(r"sha256 [0-9a-f]{64}", proc.stdout)) == 3


def test_cli_failing_variant_exit_1_with_diff(run_cli, broken_file):
    source = f"{broken_file}::RemoveKeepsLinks"
    proc = run_cli("validate", "kvqueue", source, "--ops", "2000")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL" in proc.stdout
    assert "operation #1 remove(block " in proc.stdout
    # The pair's fields are named (issue 36): which of the two links is not cleared.
    assert "(prev, next) expected: (None, None)" in proc.stdout
    assert "(prev, next) got:      (" in proc.stdout
    assert proc.stderr.strip() == f"refused: {source}"


def test_cli_bad_source_exit_2(run_cli, tmp_path):
    proc = run_cli("validate", "kvqueue", str(tmp_path / "nope.py"))
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert err.startswith("kvqueue validate: ") and "\n" not in err
    proc = run_cli("validate", "kvqueue", "vllm==not.a.version")
    assert proc.returncode == 2
    assert "is not a vLLM version number" in proc.stderr


def test_cli_json(run_cli, good_path):
    proc = run_cli("validate", "kvqueue", str(good_path), "--ops", "1000", "--seed", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["seed"] == 5 and doc["ops"] == 1000
    base, good = doc["results"]
    assert base["ok"] and good["ok"]
    assert good["provenance"]["resolved_path"] == str(good_path.resolve())
    assert good["provenance"]["block_source"] == "kvqueue"
    assert good["sha256"] == good["provenance"]["class_sha256"]


# -------------------------------------------------- against the real release


@pytest.mark.network
def test_mutants_refused_against_vllm_0_32_0(broken_file):
    """Needs the network (unless cached): the same mutants, with the real release as
    baseline and block class."""
    sources = ["vllm==0.32.0", *(f"{broken_file}::{m.name}" for m in MUTANTS)]
    variants = loader.load_variants(sources)
    results = gate.gate(variants, ops=QUICK_OPS)
    assert results[0].ok, results[0].error
    for mutant, result in zip(MUTANTS, results[1:], strict=True):
        assert not result.ok, mutant.name
        assert mutant.names_op in result.error, (mutant.name, result.error)


# ------------------------------------------------------------- the timed sizes


@dataclass(frozen=True)
class SizeMutant(Mutant):
    """A mutant that misbehaves only at the timed sizes; ``first_size`` refuses it."""

    first_size: int


#: Part 1's queues hold at most 52 blocks (ids < 52), and in its 60,000 default operations
#: no ``append_n`` gives back 32 blocks, so none of these ever misbehaves there.
SIZE_MUTANTS = [
    SizeMutant(
        "PopOneKeepsLinksWhenLong",
        "popleft_n(1) does not clear the popped block's links once num_free_blocks >= 60",
        (
            (
                "            only.prev_free_block = None\n"
                "            only.next_free_block = None\n"
                "            if after is not None:\n",
                # The count was already decremented: +1 is the count before the pop.
                "            if self.num_free_blocks + 1 < 60:\n"
                "                only.prev_free_block = None\n"
                "                only.next_free_block = None\n"
                "            if after is not None:\n",
            ),
        ),
        "popleft_n(1)",
        first_size=64,
    ),
    SizeMutant(
        "RemoveKeepsLinksOfHighIds",
        "remove() of a block whose block_id >= 1000 does not clear its links",
        (
            (
                "        block.prev_free_block = None\n        block.next_free_block = None\n"
                "        self.num_free_blocks -= 1\n",
                "        if block.block_id < 1000:\n"
                "            block.prev_free_block = None\n"
                "            block.next_free_block = None\n"
                "        self.num_free_blocks -= 1\n",
            ),
        ),
        "remove(block ",
        first_size=2048,
    ),
    SizeMutant(
        "AppendN32ForgetsTailLink",
        "append_n() of exactly 32 blocks (the alloc32 and mix batch) leaves the tail's back "
        "link on the old last block",
        (
            (
                "        last.next_free_block = self.fake_free_list_tail\n"
                "        self.fake_free_list_tail.prev_free_block = last\n"
                "        self.num_free_blocks += len(blocks)\n",
                "        last.next_free_block = self.fake_free_list_tail\n"
                "        if len(blocks) != 32:\n"
                "            self.fake_free_list_tail.prev_free_block = last\n"
                "        self.num_free_blocks += len(blocks)\n",
            ),
        ),
        "append_n([",
        first_size=64,
    ),
    SizeMutant(
        "GetAllStopsAt1024",
        "get_all_free_blocks() returns at most 1,024 blocks",
        (
            (
                "        while curr.next_free_block is not None:\n",
                "        while curr.next_free_block is not None and len(found) < 1024:\n",
            ),
        ),
        "get_all_free_blocks()",
        first_size=2048,
    ),
    SizeMutant(
        "IterStopsAfter1024",
        "iter_blocks_after() yields at most 1,024 blocks",
        (
            (
                "        while curr is not None and curr is not self.fake_free_list_tail:\n"
                "            yield curr\n",
                "        for _ in range(1024):\n"
                "            if curr is None or curr is self.fake_free_list_tail:\n"
                "                return\n"
                "            yield curr\n",
            ),
        ),
        "iter_blocks_after(None)",
        first_size=2048,
    ),
]

#: Batches longer than 16: part 1 refuses these already (at the default seed it pops 17+
#: blocks 131 times in 60,000 operations), and part 2 must refuse them on its own.
LONG_BATCH_MUTANTS = [
    Mutant(
        "AppendNLongForgetsTailLink",
        "append_n() of more than 16 blocks leaves the tail's back link on the old last block",
        (
            (
                "        last.next_free_block = self.fake_free_list_tail\n"
                "        self.fake_free_list_tail.prev_free_block = last\n"
                "        self.num_free_blocks += len(blocks)\n",
                "        last.next_free_block = self.fake_free_list_tail\n"
                "        if len(blocks) <= 16:\n"
                "            self.fake_free_list_tail.prev_free_block = last\n"
                "        self.num_free_blocks += len(blocks)\n",
            ),
        ),
        "append_n([",
    ),
    Mutant(
        "PopNLongCountsOneLess",
        "popleft_n(n > 16) decrements num_free_blocks by n - 1",
        (
            (
                "        assert self.num_free_blocks >= n\n        self.num_free_blocks -= n\n",
                "        assert self.num_free_blocks >= n\n"
                "        self.num_free_blocks -= n if n <= 16 else n - 1\n",
            ),
        ),
        "popleft_n(",
    ),
]


@pytest.fixture(scope="module")
def size_file(tmp_path_factory) -> Path:
    """One file: the fixture's KVCacheBlock and every size/long-batch mutant as a class."""
    good_text = (Path(__file__).parent / "queues" / "good.py").read_text()
    header = good_text[: good_text.index("class FreeKVCacheBlockQueue:")]
    path = tmp_path_factory.mktemp("sized") / "sized.py"
    mutants = [*SIZE_MUTANTS, *LONG_BATCH_MUTANTS]
    path.write_text(header + "\n\n".join(mutate(good_text, m) for m in mutants))
    return path


@pytest.fixture(scope="module")
def small_queue_gate(size_file, baseline):
    """The gate without part 2 (``sizes=()``, i.e. the gate before it had part 2) at its
    default 60,000 operations, over every size mutant."""
    variants = [baseline, *(load(f"{size_file}::{m.name}", baseline) for m in SIZE_MUTANTS)]
    return gate.gate(variants, sizes=())


def test_default_sizes_are_the_timed_pools_and_the_minimum():
    assert (schema.MIN_POOL, *schema.POOLS) == size_check.DEFAULT_SIZES
    gate_params = inspect.signature(gate.gate).parameters
    assert gate_params["sizes"].default == size_check.DEFAULT_SIZES
    assert gate_params["size_ops"].default is None
    # The timed batch lengths: alloc1/2/8/32 and the batches of mix.
    assert size_check.TIMED_BATCHES == (1, 2, 8, 32)
    assert max(queue_cases.MIX_SIZES) <= max(size_check.TIMED_BATCHES) < size_check.MAX_BATCH


@pytest.mark.parametrize("mutant", SIZE_MUTANTS, ids=lambda m: m.name)
def test_small_queue_gate_passes_size_mutants(mutant, small_queue_gate):
    """What the issue says: before part 2 the gate passed all of these (so they would
    have been timed)."""
    result = small_queue_gate[1 + SIZE_MUTANTS.index(mutant)]
    assert result.label.endswith(f"::{mutant.name}")
    assert result.ok, f"{mutant.name}: {result.error}"
    assert result.ops_checked == model_check.DEFAULT_OPS
    assert result.invalid_compared == len(invalid_ops.INVALID_SCENARIOS)
    assert result.sizes == () and result.size_ops_checked == 0


@pytest.mark.parametrize("mutant", SIZE_MUTANTS, ids=lambda m: m.name)
def test_gate_refuses_size_dependent_mutant(mutant, size_file, baseline):
    broken = load(f"{size_file}::{mutant.name}", baseline)
    base_result, result = gate.gate([baseline, broken], ops=QUICK_OPS)
    assert base_result.ok and base_result.sizes == size_check.DEFAULT_SIZES, base_result.error
    assert result.ok is False, f"gate passed a queue where {mutant.bug}"
    # Parts 1 and 3 passed it; part 2 refused it at the first size where it misbehaves.
    assert result.ops_checked == QUICK_OPS
    assert result.invalid_compared == len(invalid_ops.INVALID_SCENARIOS)
    first = result.error.splitlines()[0]
    match = re.match(
        r"size (\d+): (operation #\d+ |whole-structure check after operation #\d+: "
        r"|(get_all_free_blocks|iter_blocks_after)\(\w*\) after operation #\d+: )",
        first,
    )
    assert match, first
    assert int(match.group(1)) == mutant.first_size
    default = size_check.DEFAULT_SIZES
    assert result.sizes == default[: default.index(mutant.first_size)]
    assert result.size_ops_checked < len(default) * (QUICK_OPS // size_check.SIZE_OPS_DIVISOR)
    assert mutant.names_op in result.error, result.error
    assert "expected:" in result.error and "got:" in result.error, result.error
    assert result.line().startswith("FAIL")
    # The summary names the size that failed, not only the sizes passed before it.
    assert result.failed_size == mutant.first_size
    assert f"FAILED at {mutant.first_size:,}" in result.line()
    assert base_result.failed_size is None and "FAILED" not in base_result.line()


def test_cli_default_route_refuses_a_size_mutant(run_cli, size_file):
    """The runner's call (``--json --ops N --seed S SOURCES``, no size option) already
    runs part 2 at every timed size."""
    source = f"{size_file}::PopOneKeepsLinksWhenLong"
    seed = str(model_check.DEFAULT_SEED)
    proc = run_cli("validate", "--json", "--ops", "60000", "--seed", seed, "kvqueue", source)
    assert proc.returncode == 1, proc.stderr
    base, broken = json.loads(proc.stdout)["results"]
    assert base["ok"] and base["sizes"] == list(size_check.DEFAULT_SIZES)
    assert base["size_ops_checked"] == 3 * 15_000
    assert not broken["ok"] and broken["sizes"] == [] and broken["failed_size"] == 64
    assert broken["error"].startswith("size 64: operation #"), broken["error"]
    assert "popleft_n(1): block " in broken["error"]
    assert "is not in the queue but its links are not cleared" in broken["error"]


@pytest.mark.parametrize("mutant", LONG_BATCH_MUTANTS, ids=lambda m: m.name)
def test_long_batch_mutants_are_refused_by_each_model_check_alone(mutant, size_file, baseline):
    broken = load(f"{size_file}::{mutant.name}", baseline)
    with pytest.raises(naming.ValidationError) as small:
        model_check.model_check(broken)
    assert mutant.names_op in str(small.value)
    for size in size_check.DEFAULT_SIZES:
        with pytest.raises(naming.ValidationError) as sized:
            size_check.size_check(broken, size, ops=QUICK_OPS // size_check.SIZE_OPS_DIVISOR)
        message = str(sized.value)
        assert message.startswith(f"size {size}: operation #"), message
        assert mutant.names_op in message, message
        # Part 2 builds long batches far more often: it fails within a few dozen ops.
        assert sized.value.passed < 200, message


def test_correct_queues_pass_at_every_timed_size(default_run):
    """kvqueue, the good fixture and the floor bound, at the default op count."""
    _, results, _, _ = default_run
    per_size = model_check.DEFAULT_OPS // size_check.SIZE_OPS_DIVISOR
    assert per_size == 15_000
    for result in results:
        assert result.ok, result.error
        assert result.sizes == size_check.DEFAULT_SIZES
        assert set(schema.POOLS) <= set(result.sizes) and schema.MIN_POOL in result.sizes
        assert result.size_ops_checked == len(size_check.DEFAULT_SIZES) * per_size
        # Elapsed time is recorded and part of the total. The bound is loose (measured
        # ~1.2 s); an O(size) check after every operation would take ~10 minutes.
        assert 0 < result.size_seconds < result.seconds
        assert result.size_seconds < 60
        assert "+45,000 at sizes 64/2048/100000" in result.line()


def test_size_check_exercises_timed_batches_ids_and_counts(baseline):
    """At 2,048 blocks: every operation, every timed batch length and longer ones,
    block ids >= 1000, a count that never drops below 60, and regular full walks."""
    ops = model_check.DEFAULT_OPS // size_check.SIZE_OPS_DIVISOR
    seen: Counter = Counter()
    lengths: dict[str, set[int]] = {"popleft_n": set(), "append_n": set(), "prepend_n": set()}
    ids: set[int] = set()
    counts: list[int] = []
    real_step, real_walk = size_check._SizedRun.step, size_check._SizedRun.walk

    def step(self):
        real_step(self)
        desc = self.where.split(" ", 2)[2]
        kind = re.match(r"[a-z_]+", desc).group()
        seen[kind] += 1
        if kind == "popleft_n":
            lengths[kind].add(int(re.match(r"popleft_n\((\d+)\)", desc).group(1)))
        elif kind in ("append_n", "prepend_n"):
            lengths[kind].add(len(json.loads(desc[len(kind) + 1 : -1])))
        ids.update(i for i in self.dirty if i < self.size)
        counts.append(self.count)

    def walk(self):
        seen["walk"] += 1
        real_walk(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(size_check._SizedRun, "step", step)
        mp.setattr(size_check._SizedRun, "walk", walk)
        assert size_check.size_check(baseline, 2048, ops) == ops
    kinds = {"popleft", "popleft_n", "remove", "append", "append_n", "prepend_n"}
    assert all(seen[k] > 500 for k in [*kinds, "iter_blocks_after"]), seen
    for kind, found in lengths.items():
        assert set(size_check.TIMED_BATCHES) <= found, (kind, sorted(found))
        assert max(found) == size_check.MAX_BATCH, (kind, sorted(found))
    assert sum(i >= 1000 for i in ids) > 900
    assert min(counts) >= 60 and max(counts) == 2048
    assert seen["walk"] >= ops // (2048 // 20)


@pytest.mark.parametrize("bad", [0, -64, 64.0, True, "64"])
def test_gate_refuses_bad_sizes_before_running(bad, baseline):
    with pytest.raises(ValueError, match="queue sizes must be whole numbers >= 1"):
        gate.gate([baseline], sizes=[64, bad])


def test_size_check_same_seed_same_result(size_file, baseline):
    broken = load(f"{size_file}::RemoveKeepsLinksOfHighIds", baseline)
    errors = []
    for seed in (3, 3, 4):
        with pytest.raises(naming.ValidationError) as info:
            size_check.size_check(broken, 2048, ops=2_000, seed=seed)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert errors[0] != errors[2]


@pytest.mark.slow
def test_gate_with_sizes_runs_on_a_bare_interpreter():
    """Part 2 needs nothing outside the standard library (``python -I -S``)."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from kvqueue.sources import loader\n"
        "from kvqueue.gate import gate\n"
        "r = gate.gate(loader.load_variants(['kvqueue']), ops=400)[0]\n"
        "print(r.ok, r.sizes, r.size_ops_checked)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True (64, 2048, 100000) 300"


@pytest.mark.network
def test_size_mutants_refused_against_vllm_0_32_0(size_file):
    """Needs the network (unless cached): the release itself passes at the timed sizes;
    the size mutants do not."""
    sources = ["vllm==0.32.0", *(f"{size_file}::{m.name}" for m in SIZE_MUTANTS)]
    results = gate.gate(loader.load_variants(sources), ops=QUICK_OPS)
    assert results[0].ok, results[0].error
    assert results[0].sizes == size_check.DEFAULT_SIZES
    for mutant, result in zip(SIZE_MUTANTS, results[1:], strict=True):
        assert not result.ok, mutant.name
        assert result.error.startswith(f"size {mutant.first_size}: "), result.error
        assert mutant.names_op in result.error, (mutant.name, result.error)
