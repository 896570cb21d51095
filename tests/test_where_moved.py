"""Where the cost moved (issue 36, item 2): per C function, per Python function and per
line, base against head.

The fast tests read hand-written cachegrind and callgrind files and perf maps (the
formats valgrind 3.19 writes: ``fn=`` blocks, name compression, relative positions, call
lines, contexts split by caller), align two texts by their diff, check the demo pair of
fixture queues (``tests/queues/append_base.py`` and ``append_head.py``) and the words
and tables, and carry a counts run's ``where.csv`` through the processed table into a
writeup. The slow tests count the demo pair with ``make regress``'s route (CPython of
the project's venv) and profile it with the perf trampoline (CPython >= 3.12).
"""

from __future__ import annotations

import ast
import difflib
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvqueue import schema
from kvqueue.ab import where_tables, where_text
from kvqueue.measure import cost_files, function_profile, profiled_worker, where_run
from kvqueue.stats import cost_moves, count_figures

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "tests" / "queues" / "append_base.py"
HEAD = REPO / "tests" / "queues" / "append_head.py"

# ------------------------------------------------------------------ cachegrind files

CACHEGRIND = """\
desc: I1 cache:         32768 B, 64 B, 8-way associative
cmd: /usr/bin/python3 -S -m kvqueue.measure.counted_worker
events: Ir Dr Dw
fl=Python/ceval.c
fn=_PyEval_EvalFrameDefault
100 10 2 1
101 5
fl=Include/object.h
fn=_PyEval_EvalFrameDefault
40 7 1
fl=Objects/listobject.c
fn=list_append
12 3 1 1
13 2
fl=Objects/other.c
fn=list_append
9 1
summary: 28 4 2
"""


def test_cachegrind_functions_sum_every_block_of_a_function() -> None:
    got = cost_files.cachegrind_functions(CACHEGRIND)
    # Inlined header code (fl=Include/object.h) is the function's own; two files with one
    # static name are one name.
    assert got == {"_PyEval_EvalFrameDefault": 22, "list_append": 6}
    assert cost_files.cachegrind_functions(CACHEGRIND, "Dr") == {
        "_PyEval_EvalFrameDefault": 3,
        "list_append": 1,
    }


def test_cachegrind_functions_refuse_a_file_without_events() -> None:
    with pytest.raises(Exception, match="events"):
        cost_files.cachegrind_functions("fn=x\n1 2\n")
    with pytest.raises(Exception, match="no Ir events"):
        cost_files.cachegrind_functions("events: Dr\nfn=x\n1 2\n")


def test_per_op_functions_are_target_minus_zero_over_the_operations() -> None:
    zero = {"a": 1000, "b": 500, "gone": 40}
    target = {"a": 3000, "b": 500, "new": 200}
    assert cost_files.per_op_functions(target, zero, 100) == {
        "a": 20.0,
        "gone": -0.4,
        "new": 2.0,
    }
    with pytest.raises(ValueError):
        cost_files.per_op_functions(target, zero, 0)


# ------------------------------------------------------------------ callgrind files

#: top -> mid -> leaf (10 calls), as callgrind writes it with the perf trampoline and
#: --separate-callers: trampolines 0x...a00 (top), 0x...a0b (mid), 0x...a16 (leaf); each
#: enters the evaluator, which reaches the next trampoline through the evaluator's helper.
CALLGRIND = """\
# callgrind format
version: 1
positions: line
events: Ir
summary: 1000

ob=(1) /usr/lib/libpython3.12.so
fl=(1) Python/ceval.c
fn=(1) 0x0000000000000a00
0 2
cfn=(2) _PyEval_EvalFrameDefault'0x0000000000000a00
calls=1 655
0 600
0 1

fn=(2)
655 50
+1 10
cfn=(3) py_trampoline_evaluator
calls=1 10
* 500
fn=(3)
10 5
cfn=(4) 0x0000000000000a0b'py_trampoline_evaluator'_PyEval_EvalFrameDefault'0x0000000000000a00
calls=1 0
* 495

fn=(4)
0 3
cfn=(5) _PyEval_EvalFrameDefault'0x0000000000000a0b
calls=1 655
0 492

fn=(5)
655 100
cfn=(6) list_append
calls=10 20
* 40
cfn=(7) 0x0000000000000a16'py_trampoline_evaluator'_PyEval_EvalFrameDefault'2'0x0000000000000a0b
calls=10 0
* 352

fn=(6)
20 40

fn=(7)
0 20
cfn=(8) _PyEval_EvalFrameDefault'2
calls=10 655
0 332

fn=(8)
655 332
"""

PERF_MAP = """\
a00 b py::top:/src/tr.py
a0b b py::Queue.mid:/src/git/repo@0123:vllm/q.py
a16 b py::leaf:/src/tr.py
7f00 10 something else
"""


def test_parse_callgrind_follows_compression_positions_and_calls() -> None:
    ctx = cost_files.parse_callgrind(CALLGRIND)
    top = ctx["0x0000000000000a00"]
    assert top.self_cost == 3 and top.calls == [
        ("_PyEval_EvalFrameDefault'0x0000000000000a00", 1, 600)
    ]
    assert top.inclusive == 603
    evaluator = ctx["_PyEval_EvalFrameDefault'0x0000000000000a00"]
    assert evaluator.self_cost == 60 and evaluator.function == "_PyEval_EvalFrameDefault"
    leaf = ctx[
        "0x0000000000000a16'py_trampoline_evaluator'_PyEval_EvalFrameDefault'2'0x0000000000000a0b"
    ]
    # recursion levels ('2) are not callers
    assert leaf.callers == [
        "py_trampoline_evaluator",
        "_PyEval_EvalFrameDefault",
        "0x0000000000000a0b",
    ]


def test_read_perf_map_keeps_python_functions_and_colons_in_file_names() -> None:
    got = cost_files.read_perf_map(PERF_MAP)
    assert got == {
        0xA00: ("/src/tr.py", "top"),
        0xA0B: ("/src/git/repo@0123:vllm/q.py", "Queue.mid"),
        0xA16: ("/src/tr.py", "leaf"),
    }


def test_python_functions_inclusive_exclusive_and_calls() -> None:
    funcs = cost_files.python_functions(
        cost_files.parse_callgrind(CALLGRIND), cost_files.read_perf_map(PERF_MAP)
    )
    top, mid, leaf = (
        ("/src/tr.py", "top"),
        ("/src/git/repo@0123:vllm/q.py", "Queue.mid"),
        ("/src/tr.py", "leaf"),
    )
    # leaf: 20 own + 332 below it, 10 calls; nothing Python below it.
    assert funcs[leaf] == (352, 352, 10)
    # mid: 3 + 492; its Python child leaf (nearest trampoline caller: mid) is 352.
    assert funcs[mid] == (495, 495 - 352, 1)
    # top: 603, minus mid's 495; called from outside the dump: no calls counted in it.
    assert funcs[top] == (603, 603 - 495, 0)
    assert cost_files.c_functions(cost_files.parse_callgrind(CALLGRIND)) == {
        "_PyEval_EvalFrameDefault": 60 + 100 + 332,
        "py_trampoline_evaluator": 5,
        "list_append": 40,
    }


def test_a_profile_is_per_operation_and_groups_by_part_and_layer() -> None:
    parts = {"/src/git/repo@0123:vllm/q.py": "vllm/q.py"}
    prof = function_profile.profile_from_files(CALLGRIND, PERF_MAP, parts, ops=10)
    assert prof.python[("/src/tr.py", "leaf")] == function_profile.FunctionCost(35.2, 35.2, 1.0)
    assert prof.by_part() == {
        ("vllm/q.py", "Queue.mid"): function_profile.FunctionCost(49.5, 14.3, 0.1)
    }
    assert prof.part("/src/tr.py") == function_profile.OTHER_PART
    layers = prof.layers(lambda part, qualname: "queue" if part == "vllm/q.py" else None)
    assert layers == pytest.approx({"queue": 14.3, "other": 35.2 + 10.8})
    # Exclusive costs add up to the top function's inclusive cost.
    assert sum(layers.values()) == pytest.approx(60.3)
    assert prof.total == pytest.approx((3 + 60 + 5 + 3 + 100 + 40 + 20 + 332) / 10)


# ------------------------------------------------------------------ the demo pair


def _class_text(path: Path) -> tuple[str, int]:
    from kvqueue.sources import loader

    src = loader.read_source(str(path))
    return src.text, src.first_line


def test_the_demo_head_differs_from_its_base_in_the_append_lines_alone() -> None:
    (base, b0), (head, h0) = _class_text(BASE), _class_text(HEAD)
    diff = [
        line
        for line in difflib.unified_diff(base.splitlines(), head.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert sorted(diff) == [
        "+            append(curr)",
        "+        append = taken.append",
        "-            taken.append(curr)",
    ]
    assert b0 != h0  # the classes start on different lines of their files


def _where(
    text: str,
    first: int,
    counts: dict[int, float],
    special: dict[int, tuple[str, ...]],
    instructions: float,
    c: dict[str, float],
) -> cost_moves.VariantWhere:
    return cost_moves.VariantWhere(
        instructions,
        c,
        {("queue", "Q.popleft_n", line): v for line, v in counts.items()},
        {("queue", line): v for line, v in special.items()},
        [cost_moves.Part("queue", first, text)],
    )


BASE_TEXT = """\
class Q:
    def popleft_n(self, n):
        ret = []
        for _ in range(n):
            ret.append(x)
        return ret
"""
HEAD_TEXT = """\
class Q:
    def popleft_n(self, n):
        ret = []
        append = ret.append
        for _ in range(n):
            append(x)
        return ret
"""


def _pair() -> tuple[cost_moves.VariantWhere, cost_moves.VariantWhere]:
    base = _where(
        BASE_TEXT,
        10,
        {12: 2.0, 13: 18.0, 14: 48.0, 15: 1.0},
        {14: ("LOAD_METHOD_NO_DICT", "PRECALL_NO_KW_LIST_APPEND", "CALL_ADAPTIVE")},
        1000.0,
        {"_PyEval_EvalFrameDefault": 300.0, "_PyList_AppendTakeRefListResize": 10.75},
    )
    head = _where(
        HEAD_TEXT,
        20,
        {22: 2.0, 23: 3.0, 24: 18.0, 25: 48.0, 26: 1.0},
        {23: ("LOAD_ATTR_ADAPTIVE",), 25: ("PRECALL_NO_KW_BUILTIN_O", "CALL_ADAPTIVE")},
        1106.0,
        {"_PyEval_EvalFrameDefault": 347.75, "list_append": 30.75, "PyCMethod_New": 6.88},
    )
    return base, head


def test_lines_are_aligned_by_the_diff_with_their_own_numbers() -> None:
    base, head = _pair()
    rows, unaligned = cost_moves.align_lines(base, head)
    assert unaligned == []
    got = [(r.tag, r.base_line, r.head_line, r.text) for r in rows]
    # Base's class starts on line 10, head's on 20: each line keeps its file's number.
    assert got == [
        (" ", 12, 22, "ret = []"),
        ("+", None, 23, "append = ret.append"),
        (" ", 13, 24, "for _ in range(n):"),
        ("-", 14, None, "ret.append(x)"),
        ("+", None, 25, "append(x)"),
        (" ", 15, 26, "return ret"),
    ]
    by_text = {r.text: r for r in rows}
    assert by_text["ret.append(x)"].base == 48.0 and by_text["append(x)"].head == 48.0
    assert math.isnan(by_text["ret.append(x)"].head) and math.isnan(by_text["append(x)"].base)
    assert by_text["append = ret.append"].delta == 3.0
    assert by_text["for _ in range(n):"].delta == 0.0
    assert by_text["append(x)"].head_specialised == ("PRECALL_NO_KW_BUILTIN_O", "CALL_ADAPTIVE")


def test_lines_of_the_diff_that_never_ran_are_counted_not_shown() -> None:
    base, head = _pair()
    text = HEAD_TEXT.replace(
        "        return ret\n",
        "        if n < 0:\n            raise ValueError\n        return ret\n",
    )
    # ``return ret`` moves from line 26 to 28; the two new lines never run.
    lines = {(p, q, 28 if line == 26 else line): v for (p, q, line), v in head.lines.items()}
    head = cost_moves.VariantWhere(
        head.instructions, head.c, lines, head.specialised, [cost_moves.Part("queue", 20, text)]
    )
    moves = cost_moves.compare("alloc8", 2048, base, head)
    assert moves.diff_not_run == 2
    assert "raise ValueError" not in {r.text for r in moves.lines}
    assert "2 lines of the diff never ran in these loops." in where_text.details(moves)


def test_a_part_without_text_is_listed_by_line_number() -> None:
    base, head = _pair()
    head = cost_moves.VariantWhere(
        head.instructions, head.c, head.lines, head.specialised, [cost_moves.Part("queue", 20)]
    )
    rows, unaligned = cost_moves.align_lines(base, head)
    assert unaligned == ["queue"]
    assert {r.tag for r in rows} == {cost_moves.UNALIGNED}
    assert [r.base_line or r.head_line for r in rows] == sorted(
        {12, 13, 14, 15, 22, 23, 24, 25, 26}
    )


def test_top_moves_rank_by_size_and_sum_the_rest() -> None:
    shown, rest, n = cost_moves.top_moves(
        {"a": 1.0, "b": 5.0, "c": 2.0}, {"a": 4.0, "b": 5.0, "d": 0.5}, top=1
    )
    assert [(m.name, m.delta) for m in shown] == [("a", 3.0)]
    assert (rest, n) == (-2.0 + 0.5, 2)
    assert math.isnan(cost_moves.top_moves({}, {"x": 1.0})[0][0].base)


def test_the_sentence_names_the_changed_lines_and_the_c_functions_that_rose() -> None:
    base, head = _pair()
    moves = cost_moves.compare("alloc8", 2048, base, head)
    text = where_text.sentence(moves)
    assert text.startswith(
        "alloc8 (pool 2,048): head executes 106.0 more instructions per operation"
    )
    assert "(+10.60 %)" in text
    assert "line 25 `append(x)` (48.0 bytecodes/op; PRECALL_NO_KW_BUILTIN_O)" in text
    assert "line 23 `append = ret.append` (3.0 bytecodes/op; LOAD_ATTR_ADAPTIVE)" in text
    assert (
        "where base ran line 14 `ret.append(x)` (48.0 bytecodes/op; LOAD_METHOD_NO_DICT, "
        "PRECALL_NO_KW_LIST_APPEND)"
    ) in text
    assert "CALL_ADAPTIVE" not in text  # run by both sides: no difference
    assert (
        "The extra instructions went to C functions _PyEval_EvalFrameDefault (+47.8), "
        "list_append (+30.8) and PyCMethod_New (+6.9); fewer in "
        "_PyList_AppendTakeRefListResize (-10.8) (instructions/op)."
    ) in text
    md = where_text.markdown([moves])
    assert md.startswith("### Where the instructions moved\n")
    summary = "<details><summary>alloc8 (pool 2,048): C functions, Python functions and lines"
    assert summary in md and md.count("exact in bytecodes") == 1  # the method once
    assert "| `list_append` | – | 30.8 | +30.8 |" in md
    assert (
        "| + |  | 25 | `append(x)` | – | 48.0 | +48.0 | PRECALL_NO_KW_BUILTIN_O, CALL_ADAPTIVE |"
    ) in md
    assert "bytecodes/op" in md and "exact in bytecodes" in md
    plain = where_text.plain(moves, "base", "head")
    assert "list_append" in plain and "append(x)" in plain and "|" not in plain


def test_python_functions_are_instructions_with_the_trampoline_else_bytecodes() -> None:
    base, head = _pair()
    moves, unit = cost_moves.function_moves(base, head)
    assert unit == cost_moves.BYTECODES and [m.name for m in moves] == ["Q.popleft_n"]
    assert moves[0].delta == 3.0
    base = cost_moves.VariantWhere(1.0, python={("queue", "Q.popleft_n"): (9.0, 7.0, 1.0)})
    head = cost_moves.VariantWhere(1.0, python={("queue", "Q.popleft_n"): (12.0, 9.5, 1.0)})
    moves, unit = cost_moves.function_moves(base, head)
    assert unit == cost_moves.INSTRUCTIONS and moves[0].delta == 2.5


# ------------------------------------------------------------------ where.csv to the writeup


def test_where_rows_keep_numbers_and_names_never_text(tmp_path: Path) -> None:
    totals = where_run.FunctionTotals()
    zero = {"label": "base", "case": "*", "pool": 2048, "run": "zero", "loops": 0, "per_loop": 0}
    target = {**zero, "case": "alloc8", "run": "target", "loops": 1000, "per_loop": 1}
    totals(zero, {"eval": 5_000, "tiny": 100, "gone": 40})
    totals(target, {"eval": 305_000, "tiny": 150, "new": 2_000})
    record = {
        "ops": 1000,
        "parts": [
            {"part": "queue", "where": str(BASE), "first_line": 35, "lines": 3, "text": "a\nb\nc\n"}
        ],
        "lines": [["queue", "Q.popleft_n", 36, 48_000]],
        "specialised": [["queue", 36, ["PRECALL_NO_KW_LIST_APPEND"]]],
    }
    rows = where_run.where_rows(totals, {("base", "alloc8", 2048): record})
    kinds = {(r["kind"], r["name"]): r for r in rows}
    assert kinds[("c", "eval")]["value"] == 300_000 and kinds[("c", "new")]["value"] == 2_000
    # 50 and -40 instructions over 1,000 operations are below 0.1 per operation: summed.
    assert kinds[("c", schema.WHERE_REST)]["value"] == 10
    part = kinds[("part", str(BASE))]
    assert part["detail"] == schema.text_sha256("a\nb\nc\n") and part["value"] == 3
    line = kinds[("line", "Q.popleft_n")]
    assert (line["line"], line["value"], line["detail"]) == (
        36,
        48_000,
        "PRECALL_NO_KW_LIST_APPEND",
    )
    assert all(set(r) == set(schema.WHERE_COLUMNS) for r in rows)
    assert not any("a\nb" in str(v) for r in rows for v in r.values())


def test_part_text_is_used_only_when_its_sha256_matches(tmp_path: Path) -> None:
    f = tmp_path / "q.py"
    f.write_text("x = 1\nclass Q:\n    pass\ny = 2\n", encoding="utf-8")
    cls = "class Q:\n    pass\n"
    assert where_tables.part_text(str(f), 2, 2, schema.text_sha256(cls)) == cls
    assert where_tables.part_text(str(f), 2, 2, schema.text_sha256("other")) is None
    assert where_tables.part_text(str(tmp_path / "missing.py"), 1, 0, "0" * 64) is None
    whole = f.read_text(encoding="utf-8")
    assert where_tables.part_text(str(f), 1, 0, schema.text_sha256(whole)) == whole


def _processed_where(
    base_text: str, head_text: str, folder: Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """count_where and count_pairs of a made-up counts run of the _pair() figures."""
    files = {}
    for name, text, first in (("base", base_text, 10), ("head", head_text, 20)):
        files[name] = folder / f"{name}.py"
        # The class at its own line of a longer file, as a run reads it.
        files[name].write_text("#\n" * (first - 1) + text + "# after\n", encoding="utf-8")
    base, head = _pair()
    rows = []
    for label, where, first in (("base", base, 10), ("head", head, 20)):
        text = base_text if label == "base" else head_text
        common = {
            "host": "h",
            "interpreter": "CPython 3.11.7",
            "run_id": "r1",
            "case": "alloc8",
            "pool": 2048,
            "label": label,
            "ops": 1000,
        }
        rows.append(
            {
                **common,
                "kind": "part",
                "part": "queue",
                "name": str(files[label]),
                "line": first,
                "value": len(text.splitlines()),
                "per_op": math.nan,
                "detail": schema.text_sha256(text),
            }
        )
        for fn, v in where.c.items():
            rows.append(
                {
                    **common,
                    "kind": "c",
                    "part": "",
                    "name": fn,
                    "line": None,
                    "value": int(v * 1000),
                    "per_op": v,
                    "detail": "",
                }
            )
        for (part, q, line), v in where.lines.items():
            special = " ".join(where.specialised.get((part, line), ()))
            rows.append(
                {
                    **common,
                    "kind": "line",
                    "part": part,
                    "name": q,
                    "line": line,
                    "value": int(v * 1000),
                    "per_op": v,
                    "detail": special,
                }
            )
    pairs = pd.DataFrame(
        [
            {
                "host": "h",
                "interpreter": "CPython 3.11.7",
                "run_id": "r1",
                "case": "alloc8",
                "pool": 2048,
                "candidate": "head",
                "baseline": "base",
                "candidate_instructions": 1106.0,
                "baseline_instructions": 1000.0,
                "instr_reduction": -0.106,
                "cycles_reduction": math.nan,
            }
        ]
    )
    return pd.DataFrame(rows, columns=list(schema.PROCESSED_TABLES["count_where"])), pairs


def test_the_writeup_note_shows_the_diff_measured_then_where_it_moved(tmp_path: Path) -> None:
    where, pairs = _processed_where(BASE_TEXT, HEAD_TEXT, tmp_path)
    note = where_tables.writeup_note(where, pairs, "head", "base")
    diff_at = note.index("```diff")
    assert "-            ret.append(x)" in note and "+            append(x)" in note
    sentence_at = note.index("alloc8 (pool 2,048): head executes 106.0 more")
    assert diff_at < sentence_at < note.index("<details>")
    assert "| `list_append` |" in note
    # The texts gone (another machine): no diff, lines by number.
    for f in tmp_path.glob("*.py"):
        f.unlink()
    note = where_tables.writeup_note(where, pairs, "head", "base")
    assert "```diff" not in note and "Not found here" in note and "by line number only" in note
    assert where_tables.writeup_note(where.iloc[0:0], pairs, "head", "base") == ""


def test_count_figures_read_where_csv_into_count_where(tmp_path: Path) -> None:
    header = ",".join(schema.WHERE_COLUMNS)
    text = (
        f"{header}\nalloc8,2048,base,c,,eval,,1000,300000,\n"
        f"alloc8,2048,base,line,queue,Q.popleft_n,36,1000,48000,PRECALL_NO_KW_LIST_APPEND\n"
    )
    meta = {
        "run_id": "r1",
        "host": "h",
        "status": "complete",
        "python": {"implementation": "CPython", "version": "3.11.7"},
        schema.FILES_KEY: {schema.COUNTS_CSV: {"sha256": "0" * 64}},
    }
    counts = ",".join(schema.COUNT_COLUMNS) + "\nalloc8,2048,base,target,1,1,5,,,,,,,,\n"
    run = count_figures.read_count_run(
        tmp_path, meta, {schema.COUNTS_CSV: counts.encode(), schema.WHERE_CSV: text.encode()}
    )
    assert isinstance(run, count_figures.CountRun) and len(run.where) == 2
    frame = count_figures.where_frame([run], ["r1"])
    assert list(frame.columns) == list(schema.PROCESSED_TABLES["count_where"])
    assert frame["per_op"].tolist() == [300.0, 48.0]
    assert count_figures.where_frame([run], ["other"]).empty
    bad = count_figures.read_count_run(
        tmp_path, meta, {schema.COUNTS_CSV: counts.encode(), schema.WHERE_CSV: b"a,b\n"}
    )
    assert isinstance(bad, str) and "where.csv columns" in bad


def test_the_measured_parts_of_a_queue_variant_are_its_class_lines() -> None:
    from kvqueue.sources import loader

    block = loader.load_block_class(str(BASE))
    variant = loader.load_variant(str(HEAD), block, "head")
    parts = profiled_worker.measured_parts(variant)
    assert [(p["part"], p["where"]) for p in parts] == [("queue", str(HEAD))]
    index = profiled_worker.PartIndex(parts)
    first = parts[0]["first_line"]
    assert index.part(str(HEAD), first) == "queue"
    assert index.part(str(HEAD), first - 1) is None
    assert index.part("elsewhere.py", first) is None


def test_the_bytecode_tracer_counts_the_lines_of_the_measured_files_only() -> None:
    namespace: dict[str, object] = {}
    code = compile(
        "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s\n",
        "<m>",
        "exec",
    )
    exec(code, namespace)
    f = namespace["f"]
    got = profiled_worker.count_bytecodes(lambda: f(3), {"<m>"})  # type: ignore[operator]
    per_line = {line: n for (_c, line), n in got.items()}
    assert {2, 3, 4, 5} <= set(per_line)
    # The loop body runs 3 times, the set-up once: more bytecodes at line 4 than at 2.
    assert per_line[4] > per_line[2]
    assert profiled_worker.count_bytecodes(lambda: f(3), {"<other>"}) == {}


# ------------------------------------------------------------------ slow: the demo counted


def _has_valgrind() -> bool:
    return shutil.which("valgrind") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _has_valgrind(), reason="valgrind not installed")
def test_regress_on_the_demo_names_the_changed_lines_and_a_c_function_that_rose(
    tmp_path: Path,
) -> None:
    out = tmp_path / "regress.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvqueue",
            "regress",
            "--base",
            str(BASE),
            "--head",
            str(HEAD),
            "--cases",
            "alloc1 alloc8",
            "--pools",
            "2048",
            "--python",
            sys.executable,
            "--wait",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    text = out.read_text(encoding="utf-8")
    assert "### Where the instructions moved" in text
    sentence = next(
        line for line in text.splitlines() if line.startswith("alloc8 (pool 2,048): head executes")
    )
    # The changed lines, by their text, with their bytecodes per operation.
    assert re.search(r"line \d+ `append\(curr\)` \([\d.]+ bytecodes/op", sentence), sentence
    assert re.search(r"line \d+ `append = taken.append`", sentence), sentence
    assert re.search(r"where base ran line \d+ `taken.append\(curr\)`", sentence), sentence
    # Head executes more, and the C functions it went to are named with a positive Δ.
    assert "more instructions per operation" in sentence
    went = sentence.split("The extra instructions went to C functions ", 1)[1]
    risen = re.findall(r"([A-Za-z_][\w.]*) \(\+([\d,.]+)\)", went.split(";")[0])
    assert risen and all(float(v.replace(",", "")) > 0 for _n, v in risen)
    if sys.version_info[:2] == (3, 11):
        # The generic call of a bound builtin method instead of the specialised list
        # append: list_append runs in head (its instructions rise from nothing).
        assert "list_append" in dict(risen)
        assert "PRECALL_NO_KW_BUILTIN_O" in sentence and "PRECALL_NO_KW_LIST_APPEND" in sentence
    rows = {
        m.group(1): m
        for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    }
    assert rows, text


@pytest.mark.slow
@pytest.mark.skipif(not _has_valgrind(), reason="valgrind not installed")
def test_the_trampoline_profile_gives_instructions_per_python_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python = _interpreter("3.12") or _interpreter("3.13")
    if python is None or not function_profile.trampoline_available(python):
        pytest.skip("no CPython >= 3.12 with the perf trampoline here")
    from kvqueue.measure import cachegrind, machine_lock
    from kvqueue.params.lock_params import WAIT_ENV

    spec = {
        "sources": [str(BASE), str(HEAD)],
        "labels": ["base", "head"],
        "block_source": None,
        "expected_sha256": {},
        "expected_block_sha256": {},
        "cases": ["alloc8"],
        "pools": [2048],
        "block_mode": "shared",
        "subject": "queue",
        "seed": 1,
        "case_seed": 1,
    }
    cells = [("base", "alloc8", 2048), ("head", "alloc8", 2048)]
    # Behind any bench of this machine, as make regress would be (WAIT=1).
    monkeypatch.setenv(WAIT_ENV, "1")
    with machine_lock.hold("pytest: a trampoline profile"):
        found = function_profile.profile_cells(
            python, spec, cells, valgrind=cachegrind.find_valgrind()
        )
    base, head = (found[c].by_part()[("queue", "FreeKVCacheBlockQueue.popleft_n")] for c in cells)
    # One popleft_n(8) per operation; it calls no Python function, so inclusive = exclusive.
    assert base.calls == pytest.approx(1.0) and head.calls == pytest.approx(1.0)
    assert base.inclusive == pytest.approx(base.exclusive)
    assert head.exclusive > base.exclusive
    runner = [
        cost
        for (file, qualname), cost in found[cells[1]].python.items()
        if qualname.endswith("_alloc.<locals>.run")
    ]
    # The case's runner calls popleft_n and append_n: its own cost is far below its
    # inclusive one.
    assert runner and runner[0].exclusive < 0.5 * runner[0].inclusive


def test_a_counts_only_writeup_folds_where_the_instructions_moved(tmp_path: Path) -> None:
    """The committed counts run of a counts-only pair, with count_where rows made up for
    its alloc2 cell: the pair's writeup carries the folded section, diff first."""
    import dataclasses

    from kvqueue.params.report_params import ReportSettings
    from kvqueue.report import processed_build, questions, writeup

    run = "20261201T180338Z-counts-cp311-ce4b"
    settings = ReportSettings(resamples=2000, runs=(run,))
    data = processed_build.build(REPO / "data" / "raw", tmp_path / "processed", settings)
    assert data.count_where.empty  # committed before where.csv existed
    pair = ("vllm==0.32.0", "vllm==0.31.0")
    rows = data.count_pairs[
        (data.count_pairs["candidate"] == pair[0]) & (data.count_pairs["baseline"] == pair[1])
    ]
    top = rows.loc[rows["instr_reduction"].abs().idxmax()]
    where, _ = _processed_where(BASE_TEXT, HEAD_TEXT, tmp_path)
    where = where.assign(
        host=top["host"],
        interpreter=top["interpreter"],
        run_id=run,
        case=top["case"],
        pool=int(top["pool"]),
        label=where["label"].map({"base": pair[1], "head": pair[0]}),
    )
    data = dataclasses.replace(data, count_where=where)
    (question,) = [q for q in questions.find(data) if q.pair == pair]
    text = writeup.question_writeup(question)
    summary = "<details><summary><b>Where the instructions moved: the diff measured"
    assert summary in text
    folded = text[text.index(summary) :]
    assert folded.index("```diff") < folded.index("head executes") < folded.index("| C function |")
    assert "| `list_append` |" in folded


_SNIPPET = """
import sys
sys.path.insert(0, {repo!r})
from kvqueue.measure import profiled_worker
ns = {{}}
exec(compile("def f(n):\\n    s = 0\\n    for i in range(n):\\n        s += i\\n    return s\\n",
             "<m>", "exec"), ns)
for _ in range(200):
    ns["f"](3)  # warm: specialised before it is counted, as in a profiled process
got = profiled_worker.count_bytecodes(lambda: ns["f"](3), {{"<m>"}})
print(sorted((line, n) for (_c, line), n in got.items()))
"""


def _interpreter(version: str) -> str | None:
    """A CPython ``version`` binary: pyenv's, the system's, or this one."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [
        *sorted(root.glob(f"{version}.*/bin/python{version}")),
        Path(f"/usr/bin/python{version}"),
    ]
    return next((str(p) for p in found if p.is_file()), None)


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_bytecodes_are_counted_on_every_interpreter(version: str) -> None:
    """settrace opcode events before 3.12, sys.monitoring from 3.12 (where opcode events
    asked for in a warm frame's call event never came)."""
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no CPython {version} here")
    proc = subprocess.run(
        [python, "-S", "-c", _SNIPPET.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = dict(ast.literal_eval(proc.stdout))
    assert set(got) == {2, 3, 4, 5}
    # s = 0 and return s once; the loop's body three times.
    assert got[2] == got[5] == 2 and got[4] >= 3 * 4


def test_regress_traces_the_cells_beyond_their_threshold_else_the_largest() -> None:
    from kvqueue.ab import regression_check as rc

    def cell(case: str, reduction: float, verdict: str) -> rc.CellVerdict:
        return rc.CellVerdict(case, 2048, 100.0, 100.0, reduction, 1.0, False, verdict)

    cells = [
        cell("alloc1", -0.2, rc.OK),
        cell("alloc2", -9.9, rc.REGRESSED),
        cell("alloc8", -8.0, rc.REGRESSED),
        cell("mix", 12.0, rc.IMPROVED),
        cell("remove", -2.0, rc.REGRESSED),
    ]
    assert [c.case for c in rc.where_cells(cells)] == ["mix", "alloc2", "alloc8"]
    quiet = [cell("alloc1", -0.2, rc.OK), cell("mix", 0.5, rc.OK)]
    assert [c.case for c in rc.where_cells(quiet)] == ["mix"]
    assert rc.where_cells([]) == []


def test_quick_traces_each_candidates_cell_that_moved_most() -> None:
    from kvqueue.ab import quick_loop

    def row(case: str, cand: str, pct: float) -> dict[str, object]:
        return {
            "case": case,
            "pool": 2048,
            "candidate": cand,
            "baseline": "b",
            "reduction_pct": pct,
        }

    table = [row("alloc1", "x", -1.0), row("alloc8", "x", 3.0), row("alloc1", "y", -0.5)]
    assert quick_loop.where_cells(table) == [("alloc8", 2048, "b", "x"), ("alloc1", 2048, "b", "y")]
