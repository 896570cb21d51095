"""Command line of kvqueue-bench: ``python -m kvqueue COMMAND ...``, one parser for all.

``validate``
    the validation gate on variant sources (first = baseline);
``bench``
    collect one run into ``data/raw/<host>/<run-id>/`` (``make bench``);
``report``
    rebuild ``data/processed`` and render the HTML report and PR writeup (``make report``);
``quick``
    a fast A/B loop: gate, paired processes, the comparison printed (``make quick``);
``history``
    every distinct queue version of vLLM's releases, paired (``make history``);
``policy``
    allocation policies on the churn workload, checked by invariants, into
    ``data/raw/<host>/<run-id>/`` (``make policy``);
``check-queue``
    our queue's instructions per operation against the committed reference
    (``make check-queue``);
``regress``
    a change's instructions per operation against its base, Markdown to post, exit 1 on
    a regression, 3 on a gate refusal (``make regress``);
``diffs``
    fetch the releases whose class text the history's step diffs show (``make diffs``);
``sync-notebooks``
    regenerate the notebooks' ``parameters`` cells from :mod:`kvqueue.params`;
``make-vars``
    print the Makefile's variables of each target (the Makefile includes them).

Every command is declared one way, in :data:`kvqueue.params.command_params.READS`: its
parameter fields give its options, through :func:`_add_param_options`, the Make variables
that ``--from-env`` reads (``KVQUEUE_<NAME>``, :func:`reads`) and, through ``make-vars``,
what the Makefile exports to the target of the same name; its errors end in one line
through :func:`_one_line_errors`. Each command imports what it needs when it runs (as
pyperf's ``__main__`` does): ``validate`` and ``bench`` up to the notebook are standard
library only and run on a bare interpreter, ``report`` needs the project's virtual
environment.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kvqueue.errors import BenchError, BenchInputError, GateRefused
from kvqueue.params import (
    bench_params,
    check_queue_params,
    history_params,
    lock_params,
    policy_params,
    regression_params,
    report_params,
)
from kvqueue.params.command_params import RAW_DIR, RAW_DIR_DEFAULT, READS, not_defaults, reads
from kvqueue.params.spec import (
    ENV_PREFIX,
    default_of,
    environment_texts,
    parse_texts,
    resolve_in_repo,
    spec_of,
)

_SOURCES_HELP = "vllm==X.Y.Z | FILE[::Class] | git:REPO@REF | kvqueue | kvqueue:floor"
#: Commands whose errors name their Make target (the others: ``kvqueue COMMAND``).
_MAKE_TARGETS = ("bench", "quick", "history", "policy", "check-queue", "regress", "diffs")


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors become one-line BenchInputErrors (``make bench: ...``)."""

    def error(self, message: str) -> NoReturn:
        raise BenchInputError(message)


# ------------------------------------------------------------------ one way to declare


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(default: Any) -> str:
    return " ".join(map(str, default)) if isinstance(default, tuple) else str(default)


def _add_param_options(p: argparse.ArgumentParser, command: str) -> None:
    """One option per parameter field of ``command``, its help ending in
    ``[MAKE VARIABLE; default: ...]``; the option's value is the text, ``None`` if not
    given (the field's parser reads it: :func:`kvqueue.params.spec.parse_value`)."""
    declared = READS[command]
    for f in declared.option_fields():
        spec = spec_of(f)
        default = declared.defaults.get(f.name, default_of(f))
        text = spec.help.replace("%", "%%")  # argparse formats help with %
        if spec.kind == "pairs":
            shown = "; ".join(f"{c} vs {b}" for c, b in default)
            p.add_argument(
                "--pair",
                dest=f.name,
                nargs=2,
                action="append",
                metavar=("CANDIDATE", "BASELINE"),
                help=f"{text} [repeatable; default: {shown}]",
            )
            continue
        variable = f"{spec.make}; " if spec.make else ""
        help_ = f"{text} [{variable}default: {_shown(default)}]"
        if spec.kind == "bool":
            p.add_argument(_option(f.name), action="store_const", const=True, help=help_)
        else:
            p.add_argument(_option(f.name), metavar=spec.make or f.name.upper(), help=help_)


def _add_raw_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help=f"root of the raw data [{RAW_DIR}; default: {RAW_DIR_DEFAULT}]",
    )


def _add_from_env(p: argparse.ArgumentParser, command: str, what: str) -> None:
    variables = " ".join(reads(command))
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"{what}: read {ENV_PREFIX}<MAKE VARIABLE> of {variables} (how `make {command}` "
        "passes them: verbatim, never through a shell); takes no other parameter",
    )


def _texts(args: argparse.Namespace, command: str) -> dict[str, str | None]:
    """The texts of the command's fields, keyed by field name (``None``: not given): from
    its options, or with ``--from-env`` from ``KVQUEUE_<MAKE VARIABLE>`` (its refused
    fields included), when no option may be given too."""
    declared = READS[command]
    names = [f.name for f in declared.option_fields()]
    if not getattr(args, "from_env", False):
        return _take_wait({n: getattr(args, n) for n in names})
    given = [n for n in names if getattr(args, n) is not None]
    if given:
        raise BenchInputError(f"--from-env takes no other parameter (got {_option(given[0])})")
    # A field without a Make variable (report's pairs, confidence, ...) is not read.
    return _take_wait(environment_texts(declared.read_fields(), os.environ))


def _take_wait(texts: dict[str, str | None]) -> dict[str, str | None]:
    """``texts`` without ``WAIT`` (a command's own parameters parse the rest), whose value
    is handed to the machine lock in :data:`kvqueue.params.lock_params.WAIT_ENV`: set
    for ``WAIT=1``, else cleared (so that only the command's own ``WAIT`` counts), for
    this process and the ones it starts (the bench notebook's kernel).

    Raises
    ------
    BenchInputError
        ``WAIT`` is not a boolean text.
    """
    if "wait" not in texts:
        return texts
    rest = dict(texts)
    if parse_texts(lock_params.lock_fields(), {"wait": rest.pop("wait")}).get("wait"):
        os.environ[lock_params.WAIT_ENV] = "1"
    else:
        os.environ.pop(lock_params.WAIT_ENV, None)
    return rest


def _raw_dir(args: argparse.Namespace) -> Path:
    """``--raw-dir``, else (with ``--from-env``) ``KVQUEUE_RAW_DIR``, else ``data/raw``.

    Raises
    ------
    BenchInputError
        It is a file, or under one, or it could not be made: refused before any gate or
        measurement (a file here ended a whole bench in ``NotADirectoryError``).
    """
    text = args.raw_dir or (os.environ.get(ENV_PREFIX + RAW_DIR, "") if args.from_env else "")
    path = Path(text or resolve_in_repo(RAW_DIR_DEFAULT)).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise BenchInputError(f"RAW_DIR '{text}' is a file, not a folder")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise BenchInputError(f"RAW_DIR '{text}' is under a file ({existing})")
    if existing == path:
        if not os.access(path, os.W_OK | os.X_OK):
            raise BenchInputError(f"RAW_DIR '{text}' is not writable")
        return path
    # To be made: make a folder where it would go and remove it. Permissions alone do
    # not tell (root may write anywhere, yet /proc takes no folder: a bench then failed
    # in mkdir after its gate). Never inside RAW_DIR itself: its mtime is the report's.
    import tempfile

    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".kvqueue-probe-").cleanup()
    except OSError as exc:
        raise BenchInputError(
            f"RAW_DIR '{text}': no folder can be made in {existing} ({exc.strerror})"
        ) from None
    return path


def _raw_dir_text(args: argparse.Namespace) -> str:
    """``RAW_DIR`` as given (``''``: the default), for :func:`_announce`."""
    text = args.raw_dir or (os.environ.get(ENV_PREFIX + RAW_DIR, "") if args.from_env else "")
    return "" if str(text) == RAW_DIR_DEFAULT else str(text)


def _announce(
    command: str, texts: dict[str, str | None], raw_dir: Path | None = None, **extra: str
) -> str:
    """The line a measuring command prints once its input is checked; with ``raw_dir``,
    a note when it holds a host folder whose name differs from HOST only in case
    (``HOST=x`` and ``HOST=X`` are two hosts to the report: most likely one machine)."""
    line = f"{_prefix(command)}: {not_defaults(command, texts, **extra)}"
    host = texts.get("host") or ""
    if raw_dir is not None and host and raw_dir.is_dir():
        twins = sorted(
            d.name
            for d in raw_dir.iterdir()
            if d.is_dir() and d.name != host and d.name.casefold() == host.casefold()
        )
        if twins:
            line += (
                f"\n{_prefix(command)}: note: {raw_dir} holds host {', '.join(twins)}, which "
                f"differs from HOST {host} only in case: one machine? The report keeps the "
                "two labels apart"
            )
        other = _other_cpu(raw_dir / host)
        if other:
            line += (
                f"\n{_prefix(command)}: note: HOST {host} in {raw_dir} holds runs of another "
                f"CPU than this one ({other}): the report will keep this run apart as "
                f"{host}#N; give this CPU a HOST label of its own"
            )
    return line


def _other_cpu(host_dir: Path) -> str:
    """How this machine's CPU differs from the one the runs under ``host_dir`` were
    measured on ('' when a run there has this CPU, or there is no readable run): a
    label is one CPU (docs/design.md §6), and two VMs that lscpu names alike (vendor,
    family, model, stepping) have differed in their flags."""
    if not host_dir.is_dir():
        return ""
    from kvqueue import hostinfo, schema
    from kvqueue.rawdata import host_keys

    here = hostinfo.cpu_record()
    mine = host_keys.cpu_identity(here)
    seen: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for meta_path in sorted(host_dir.glob(f"*/{schema.RUN_JSON}")):
        try:
            machine = json.loads(meta_path.read_text(encoding="utf-8")).get("machine") or {}
        except (OSError, ValueError, AttributeError):
            continue
        ident = host_keys.cpu_identity(machine)
        if ident is not None:
            seen.setdefault(ident, machine)
    if mine is None or not seen or mine in seen:
        return ""
    theirs = dict(next(iter(seen)))
    ours = dict(mine)
    differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    return "differs in " + ", ".join(differ)


def _prefix(command: str) -> str:
    """How a command's one-line errors start: ``make bench``, ``kvqueue validate``."""
    if command in _MAKE_TARGETS:
        return f"make {command}"
    return f"kvqueue {command}" if command else "kvqueue"


def _exit_status(
    command: str, exc: BaseException, status_of: Callable[[BaseException], int] | None = None
) -> int:
    """Print a bench-side error in one line; 2 bad input, 1 refused or failed (or the
    command's own ``status_of`` the error), 128 + the signal's number for a stop (130
    Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    from kvqueue.kernel import Stopped

    if isinstance(exc, Stopped):  # SIGTERM, SIGHUP: the shell's status for that signal
        return 128 + exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return 130
    print(f"{_prefix(command)}: {exc}", file=sys.stderr)
    if status_of is not None:
        return status_of(exc)
    return 2 if isinstance(exc, BenchInputError) else 1


def _one_line_errors(
    command: str, status_of: Callable[[BaseException], int] | None = None
) -> Callable[[Callable[[argparse.Namespace], int | None]], Callable[[argparse.Namespace], int]]:
    """Run a command; bad input, a refusal, a failure and Ctrl-C end in one line and an
    exit status (:func:`_exit_status`, ``status_of`` the error when the command has
    statuses of its own); otherwise the command's status (``None``: 0)."""

    def wrap(run: Callable[[argparse.Namespace], int | None]) -> Callable[..., int]:
        @functools.wraps(run)
        def cmd(args: argparse.Namespace) -> int:
            try:
                return run(args) or 0
            except (BenchInputError, GateRefused, BenchError, KeyboardInterrupt) as exc:
                return _exit_status(command, exc, status_of)

        return cmd

    return wrap


# ------------------------------------------------------------------ validate


@_one_line_errors("validate")
def _cmd_validate(args: argparse.Namespace) -> int:
    import json

    from kvqueue import schema
    from kvqueue.gate import gate
    from kvqueue.measure import child
    from kvqueue.sources import loader
    from kvqueue.subjects import queue_cases

    child.die_with_parent()  # when started by the runner (a no-op by hand)
    if sys.flags.optimize:
        raise BenchInputError(
            f"{sys.executable} runs with -O (sys.flags.optimize="
            f"{sys.flags.optimize}): asserts are stripped, the gate would check nothing"
        )
    sources = list(args.sources)
    block_source = args.block_source
    if args.from_env:
        # What `make bench` would gate: its variants (and A/A copy), ops and pool sizes.
        bench = bench_params.from_text({**_texts(args, "validate"), "host": "x"})
        sources, block_source = bench.sources, bench.block_source or None
        args.block_mode = bench.block_mode
        args.ops = bench.gate_ops
        args.sizes = tuple(sorted({schema.MIN_POOL, *bench.pools}))
        args.subject = bench.subject
        args.cases = tuple(dict.fromkeys([*bench.cases, *bench.confirm_cases]))
    if not sources:
        raise BenchInputError("give at least one SOURCE (or --from-env)")
    if args.subject != schema.SUBJECT_QUEUE:
        return _validate_stacks(sources, args)
    problem = schema.unknown_cases(schema.SUBJECT_QUEUE, args.cases)
    if problem:
        raise BenchInputError(f"--cases: {problem}")
    try:
        variants = loader.load_variants(
            sources, block_source=block_source or None, block_mode=args.block_mode
        )
    except loader.SourceError as exc:
        raise BenchInputError(str(exc)) from None
    batches = queue_cases.timed_batches(args.cases)
    results = gate.gate(
        variants,
        ops=args.ops,
        seed=args.seed,
        sizes=args.sizes,
        invalid=args.invalid_ops,
        batches=batches,
    )
    if args.json:
        records = [
            {**r.__dict__, "provenance": v.provenance()}
            for r, v in zip(results, variants, strict=True)
        ]
        doc = {
            "seed": args.seed,
            "ops": args.ops,
            "sizes": list(args.sizes),
            "batches": list(batches),
            "results": records,
        }
        print(json.dumps(doc))
    else:
        print(
            f"validation gate: seed {args.seed}, baseline {variants[0].label}, "
            + (
                "each variant's own block class, "
                if args.block_mode == "own"
                else f"block class from {variants[0].block_src.source}, "
            )
            + f"under {sys.executable} ({sys.version.split()[0]})"
        )
        for result in results:
            print(result.line())
            for note in result.notes():
                print("      " + note)
            if result.error:
                print("      " + result.error.replace("\n", "\n      "))
    failed = [r.label for r in results if not r.ok]
    if failed and not args.json:
        print(f"refused: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _validate_stacks(sources: list[str], args: argparse.Namespace) -> int:
    """``validate --subject pool|manager``: the gate of a stack subject
    (:mod:`kvqueue.gate.pool_gate`, :mod:`kvqueue.gate.manager_gate`) of every source
    against the first (a pool at ``--sizes``)."""
    import json

    from kvqueue import schema
    from kvqueue.gate import manager_gate, pool_gate
    from kvqueue.measure import stack_layout

    subject = args.subject
    kind = stack_layout.KINDS[subject]
    labels = schema.variant_labels(sources, schema.SUBJECT_LABEL_PREFIX[subject])
    try:
        variants = [kind.load(s, label) for s, label in zip(sources, labels, strict=True)]
    except kind.errors as exc:
        raise BenchInputError(str(exc)) from None
    if subject == schema.SUBJECT_POOL:
        records = pool_gate.gate_records(variants, args.sizes)
        seed, sizes, unit = pool_gate.DEFAULT_SEED, list(args.sizes), "calls"
    else:
        differences = "record" if args.invalid_ops == "record" else "refuse"
        records = manager_gate.gate_records(variants, differences)
        seed, sizes, unit = manager_gate.DEFAULT_SEED, [manager_gate.GATE_POOL], "steps"
    if args.json:
        print(json.dumps({"seed": seed, "sizes": sizes, "results": records}))
    else:
        print(
            f"{subject} gate: baseline {labels[0]}, under {sys.executable} "
            f"({sys.version.split()[0]})"
        )
        for r in records:
            named = f", named differences {', '.join(r['differences'])}" if r["differences"] else ""
            print(
                f"  {'PASS' if r['ok'] else 'FAIL'} {r['label']}: {r['ops_checked']:,} {unit} at "
                f"{' '.join(map(str, sizes))} blocks{named}"
            )
            if r["error"]:
                print("      " + r["error"])
    failed = [r["label"] for r in records if not r["ok"]]
    if failed and not args.json:
        print(f"refused: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _sizes(text: str) -> tuple[int, ...]:
    parts = text.replace(",", " ").split()
    try:
        sizes = tuple(int(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be whole numbers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive whole numbers, got {text!r}")
    return sizes


def _add_validate(sub: argparse._SubParsersAction) -> None:
    from kvqueue.gate import model_check, size_check

    p = sub.add_parser("validate", help="run the validation gate; the first source is the baseline")
    p.add_argument("sources", nargs="*", metavar="SOURCE", help=_SOURCES_HELP)
    p.add_argument(
        "--ops",
        type=int,
        default=model_check.DEFAULT_OPS,
        help="random operations per variant (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=model_check.DEFAULT_SEED, help="seed (default %(default)s)"
    )
    p.add_argument(
        "--block-source",
        default=None,
        help="source of the shared KVCacheBlock class (default: the baseline)",
    )
    p.add_argument(
        "--invalid-ops",
        choices=("refuse", "record"),
        default="refuse",
        help="refuse a candidate that differs from its reference on an invalid operation, "
        "or record the difference (a release history: contracts changed between releases)",
    )
    p.add_argument(
        "--block-mode",
        choices=("shared", "own"),
        default="shared",
        help="shared: one KVCacheBlock class for all (the baseline's); own: each variant's",
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=size_check.DEFAULT_SIZES,
        help="queue sizes of the timed-size model check, space or comma separated "
        f"(default {' '.join(map(str, size_check.DEFAULT_SIZES))})",
    )
    p.add_argument(
        "--cases",
        type=str.split,
        default=(),
        help="queue cases the run times, space separated: the timed-size check also pops "
        "and gives back N blocks for each allocN and popleftN (default: the lengths of the "
        "default cases, 1 2 8 32)",
    )
    p.add_argument(
        "--subject",
        choices=("queue", "pool", "manager"),
        default="queue",
        help="queue: the queue gate; pool: the sources are BlockPool sources, gated call by "
        "call against the first (kvqueue.gate.pool_gate); manager: KVCacheManager sources, "
        "gated step by step through a scheduler trace (kvqueue.gate.manager_gate)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    _add_from_env(
        p,
        "validate",
        "gate what `make bench` would gate (VARIANTS and the A/A copy of AA, GATE_OPS, POOLS, "
        "BLOCK_SOURCE and BLOCK_MODE; the other variables are checked as `make bench` checks "
        "them, PYTHON is the interpreter that `make validate` runs this under)",
    )
    p.set_defaults(func=_cmd_validate)


# ------------------------------------------------------------------ bench


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="collect one run into data/raw/<host>/<run-id>/",
        description="Collect one run of the timing protocol. Every option is also a Make "
        "variable of `make bench` (shown in brackets).",
    )
    _add_param_options(p, "bench")
    _add_raw_dir(p)
    p.add_argument(
        "--no-notebook",
        action="store_true",
        help="run the protocol directly instead of through notebooks/bench.ipynb",
    )
    _add_from_env(p, "bench", "every parameter from the environment")
    p.set_defaults(func=_cmd_bench)


@_one_line_errors("bench")
def _cmd_bench(args: argparse.Namespace) -> None:
    from kvqueue import schema
    from kvqueue.measure import interpreter_checks

    os.environ[bench_params.BUDGET_START_ENV] = repr(time.time())  # MAX_MINUTES counts from here
    raw_dir = _raw_dir(args)
    # The one place input is checked.
    texts = _texts(args, "bench")
    checked = interpreter_checks.check(
        bench_params.from_text(texts),
        _announce("bench", texts, raw_dir, RAW_DIR=_raw_dir_text(args)),
    )
    if checked.params.metric == "instructions":
        # Counts are deterministic and need no notebook of timing processes.
        from kvqueue.measure import counts_run

        counts_run.run_counts(checked, raw_dir, launcher_pid=os.getpid())
        return
    run_id = schema.new_run_id(checked.python["tag"])
    if args.no_notebook:
        from kvqueue.measure import runner

        runner.run_bench(checked, raw_dir, run_id)
    else:
        from kvqueue.measure import run_notebook

        run_notebook.run_bench_notebook(checked, raw_dir, run_id)


# ------------------------------------------------------------------ quick


def _add_quick(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quick",
        help="a fast A/B loop: gate, paired processes, the comparison in the terminal",
        description="Gate and time the variants with small defaults and print the "
        "comparison; nothing is written under data/raw (evidence is `make bench`). Every "
        "option is also a Make variable of `make quick` (shown in brackets).",
    )
    _add_param_options(p, "quick")
    _add_from_env(p, "quick", "the parameters from the environment")
    p.set_defaults(func=_cmd_quick)


@_one_line_errors("quick")
def _cmd_quick(args: argparse.Namespace) -> None:
    texts = _texts(args, "quick")
    from kvqueue.ab import quick_loop

    params = quick_loop.quick_params(bench_params.parse_texts(texts))
    quick_loop.run_quick(params, announce=_announce("quick", texts))


# ------------------------------------------------------------------ check-queue


def _add_check_queue(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-queue",
        help="our queue's instructions per operation against the committed reference",
        description="Count the queue (default: this project's) under cachegrind on each "
        "case at pool 2,048, per interpreter, and compare with the committed reference: "
        "more than 1 % above it fails (exit 1). UPDATE records the reference instead. "
        "Every option is also a Make variable of `make check-queue` (shown in brackets).",
    )
    _add_param_options(p, "check-queue")
    _add_from_env(p, "check-queue", "the parameters from the environment")
    p.set_defaults(func=_cmd_check_queue)


@_one_line_errors("check-queue")
def _cmd_check_queue(args: argparse.Namespace) -> int:
    from kvqueue.ab import queue_check

    texts = _texts(args, "check-queue")
    p = check_queue_params.from_text(texts)
    outcomes = queue_check.check(
        p.pythons,
        queue=p.queue,
        reference=resolve_in_repo(p.reference),
        update=p.update,
        announce=_announce("check-queue", texts),
    )
    print(queue_check.summary(outcomes), flush=True)
    return queue_check.exit_status(outcomes)


# ------------------------------------------------------------------ regress


def _add_regress(sub: argparse._SubParsersAction) -> None:
    statuses = "; ".join(
        f"{code} {meaning}" for code, meaning in regression_params.EXIT_STATUSES.items()
    )
    p = sub.add_parser(
        "regress",
        help="a change's instructions per operation against its base; exit 1 on a regression",
        description="Gate BASE and HEAD, count both under cachegrind on each case and pool "
        "of SUBJECT (queue, pool), and print the comparison as Markdown to post on a pull "
        "request (OUT also writes it, and, once the sources are being read, the refusal or "
        "error that stopped the check). A case whose head executes more than its threshold "
        "more instructions per operation than base fails (default threshold "
        f"{regression_params.DEFAULT_THRESHOLD_PCT:g} %, over 10x the spread of two "
        "counts of identical code); base and head running identical code are not counted. "
        f"Exit status: {statuses}; 128 + N when stopped by signal N. Every option is "
        "also a Make variable of `make regress` (shown in brackets).",
    )
    _add_param_options(p, "regress")
    _add_from_env(p, "regress", "the parameters from the environment")
    p.set_defaults(func=_cmd_regress)


@_one_line_errors("regress", regression_params.exit_status_of)
def _cmd_regress(args: argparse.Namespace) -> int:
    from kvqueue.ab import regression_check

    texts = _texts(args, "regress")
    checked = regression_params.from_text(texts)
    return regression_check.run_regress(checked, announce=_announce("regress", texts))


# ------------------------------------------------------------------ history


def _add_history(sub: argparse._SubParsersAction) -> None:
    *others, last = READS["history"].refused_variables()
    chosen = f"{', '.join(others)} and {last}"
    p = sub.add_parser(
        "history",
        help="time every distinct queue version of vLLM's releases into data/raw/<host>/",
        description="A bench run over vLLM's release history "
        "(kvqueue.history.history_collect): every "
        "release from the first with the V1 free-block queue to the newest (or RELEASES), "
        "each distinct class version once, own block classes, paired protocol. Every option "
        f"is also a Make variable of `make history` (shown in brackets); {chosen} are chosen "
        "by the history: given, they are refused.",
    )
    _add_param_options(p, "history")
    p.add_argument(
        "--releases",
        default=None,
        metavar=history_params.RELEASES,
        help=f"{history_params.RELEASES_HELP} [{history_params.RELEASES}; default: '']",
    )
    p.add_argument(
        "--newest",
        default=None,
        metavar=history_params.NEWEST,
        help=f"{history_params.NEWEST_HELP} [{history_params.NEWEST}; default: '']",
    )
    _add_raw_dir(p)
    _add_from_env(p, "history", "the parameters from the environment")
    p.set_defaults(func=_cmd_history)


@_one_line_errors("history")
def _cmd_history(args: argparse.Namespace) -> None:
    from kvqueue.history import history_collect

    # MAX_MINUTES budgets the whole command: the release listing and fetches included.
    os.environ[bench_params.BUDGET_START_ENV] = repr(time.time())
    texts = _texts(args, "history")
    if args.from_env:
        releases_text = os.environ.get(history_params.RELEASES_ENV, "")
        newest_text = os.environ.get(history_params.NEWEST_ENV, "")
    else:
        releases_text = args.releases or ""
        newest_text = args.newest or ""
    raw_dir = _raw_dir(args)
    bench = history_params.from_text(texts)
    newest = history_params.newest_from_text(newest_text)
    history_collect.run_history(
        bench,
        history_collect.releases_from_text(releases_text),
        raw_dir,
        newest=newest,
        announce=_announce(
            "history",
            texts,
            raw_dir,
            RELEASES=releases_text,
            NEWEST=newest_text,
            RAW_DIR=_raw_dir_text(args),
        ),
    )


# ------------------------------------------------------------------ policy


def _add_policy(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "policy",
        help="allocation policies on a churn workload into data/raw/<host>/<run-id>/",
        description="Gate, check and time the allocation policies (lru and the "
        "contiguous-run policy per window factor) on the seeded churn workload (REGIME) "
        "or a trace (TRACE), against engine age in pool turnovers; TRACE_OUT writes the "
        "synthetic workload as a trace instead. Every option is also a Make variable of "
        "`make policy` (shown in brackets).",
    )
    _add_param_options(p, "policy")
    _add_raw_dir(p)
    _add_from_env(p, "policy", "every parameter from the environment")
    p.set_defaults(func=_cmd_policy)


@_one_line_errors("policy")
def _cmd_policy(args: argparse.Namespace) -> None:
    from kvqueue import kernel, schema
    from kvqueue.policy import policy_checks, policy_collect, trace
    from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
    from kvqueue.subjects.stand_in_block import KVCacheBlock

    texts = _texts(args, "policy")
    unread = policy_params.unread_with_a_trace(texts)
    if unread:
        what = (
            "TRACE replays its own workload"
            if texts.get("trace")
            else ("TRACE_OUT writes a workload's events and runs nothing")
        )
        raise BenchInputError(
            f"{what}: {', '.join(unread)} would not be used; leave "
            f"{'it' if len(unread) == 1 else 'them'} out"
        )
    raw_dir = _raw_dir(args)
    given = policy_params.from_text(texts)
    if given.trace_out:
        # Writes the synthetic workload's events (under lru, on this project's queue: the
        # events do not depend on the variant) and runs nothing else. An existing file is
        # never replaced; SIGTERM and SIGHUP drop the partial file as Ctrl-C does.
        policy_checks.check_values(given)
        workload = policy_checks.workload_of(given)
        try:
            with kernel.stop_signals():
                count = trace.write_synthetic(
                    given.trace_out,
                    workload,
                    given.seed,
                    given.turnovers,
                    FreeKVCacheBlockQueue,
                    KVCacheBlock,
                )
        except trace.TraceError as exc:
            raise BenchInputError(f"TRACE_OUT: {exc}") from None
        print(f"wrote {given.trace_out}: {count:,} events, {given.turnovers} turnovers")
        return
    checked, info = policy_checks.check(given)
    run_id = schema.new_run_id(info["tag"], schema.KIND_POLICY)
    announce = _announce("policy", texts, raw_dir, RAW_DIR=_raw_dir_text(args))
    policy_collect.run_policy(checked, info, raw_dir, run_id, announce=announce)


# ------------------------------------------------------------------ report


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild data/processed and render the HTML report and the PR writeup",
        description="Build data/processed and render the HTML report and the PR writeup.",
    )
    _add_raw_dir(p)
    for name, (default, help_) in report_params.REPORT_PATHS.items():
        if name not in ("figures_dir", "raw_dir"):  # figures go to <out>/figures
            p.add_argument(_option(name), type=Path, default=resolve_in_repo(default), help=help_)
    p.add_argument("--out", type=Path, default=resolve_in_repo("reports"), help="report folder")
    p.add_argument("--notebook", type=Path, default=None, help="report notebook to run")
    p.add_argument(
        "--cases",
        default="",
        help="cases of the writeups' A/B tables, space separated, of any subject and N "
        "(make report CASES=...; each writeup takes its subject's; '': alloc1 alloc2 mix, "
        "and every case of a pool or manager comparison)",
    )
    p.add_argument(
        "--fetch-diffs",
        action="store_true",
        help="first fetch the releases the history's step diffs show and the cache lacks "
        "(as `make diffs`; `make report` passes it); an unreachable index is one line, "
        "and those diffs read 'not cached here'",
    )
    _add_param_options(p, "report")
    _add_from_env(p, "report", "what `make report` uses")
    p.set_defaults(func=_cmd_report)


def _report_cases(text: str) -> tuple[str, ...]:
    """The writeups' cases from ``--cases`` ('' = the headline cases): a case of any
    subject, any N (each writeup takes its subject's); an unknown one stops the report
    before anything is written."""
    from kvqueue import schema
    from kvqueue.ab.ab_tables import HEADLINE_CASES

    cases = tuple(dict.fromkeys(text.split()))
    unknown = [c for c in cases if schema.subject_of_case(c) is None]
    if unknown:
        family = schema.case_family(unknown[0])
        subject = next((s for s, f in schema.SIZED_FAMILIES.items() if family in f), "queue")
        raise BenchInputError(
            f"CASES: unknown case {unknown[0]!r}: {schema.case_problem(subject, unknown[0])}"
        )
    return cases or HEADLINE_CASES


@_one_line_errors("report")
def _cmd_report(args: argparse.Namespace) -> int:
    from kvqueue import kernel
    from kvqueue.report import build

    kernel.stop_with_parent()

    settings = report_params.from_text(_texts(args, "report"))
    cases = _report_cases(args.cases)
    raw_dir = _raw_dir(args)
    if args.fetch_diffs:
        _fetch_diffs_for_report(raw_dir)
    # Given paths are relative to the current folder, as on any command line.
    return build.report(
        raw_dir=raw_dir,
        processed_dir=args.processed_dir.resolve(),
        out=args.out.resolve(),
        settings=settings,
        notebook=args.notebook,
        cases=cases,
    )


def _fetch_diffs_for_report(raw_dir: Path) -> None:
    """Fetch the releases the history's step diffs show that are not cached (``make
    diffs``' one path, :func:`kvqueue.history.history_collect.fetch_history_releases`),
    a line per release fetched; when the index cannot be reached, one line on stderr and
    the report goes on (the diffs of those releases say they are not cached here). The
    report step never imports the measuring side (docs/design.md §8): the command does.
    """
    from kvqueue.history import history_collect
    from kvqueue.rawdata import raw_reader
    from kvqueue.sources.fetch_errors import FetchError

    try:
        history_collect.fetch_history_releases(
            raw_dir, say=lambda line: print(f"report: {line}", flush=True), summary=False
        )
    except raw_reader.RawDataError:
        return  # the build names what is wrong with the raw folder
    except FetchError as exc:
        print(
            f"kvqueue report: step diffs not fetched: {exc}; they read 'not cached here' "
            "(`make diffs` fetches them when the index is reachable)",
            file=sys.stderr,
        )


# ------------------------------------------------------------------ diffs


def _add_diffs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diffs",
        help="fetch the releases whose class text the history's step diffs show (seconds)",
        description="Read every release that the history runs under RAW_DIR name into the "
        "release cache, by the verified range reads of `make history`, without timing "
        "anything; `make report` then shows each step's diff.",
    )
    _add_raw_dir(p)
    _add_from_env(p, "diffs", "RAW_DIR")
    p.set_defaults(func=_cmd_diffs)


@_one_line_errors("diffs")
def _cmd_diffs(args: argparse.Namespace) -> None:
    from kvqueue.history import history_collect
    from kvqueue.rawdata import raw_reader
    from kvqueue.sources.fetch_errors import FetchError

    raw_dir = _raw_dir(args)
    try:
        history_collect.fetch_history_releases(raw_dir)
    except raw_reader.RawDataError as exc:
        raise BenchInputError(str(exc)) from None
    except FetchError as exc:
        raise BenchError(
            f"{exc} (the diffs need the package index that pip is configured with; the "
            "releases fetched so far stay cached)"
        ) from None


# ------------------------------------------------------------------ sync-notebooks, make-vars


def _cmd_sync_notebooks(_args: argparse.Namespace) -> int:
    from kvqueue.measure import run_notebook

    changed = run_notebook.sync_parameters_cells()
    for path in changed:
        print(f"rewrote the parameters cell of {path}")
    if not changed:
        print("notebooks: parameters cells are up to date")
    return 0


def _cmd_make_vars(_args: argparse.Namespace) -> int:
    from kvqueue.params import make_vars

    sys.stdout.write(make_vars.fragment())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The one parser of ``python -m kvqueue`` (all subcommands)."""
    parser = _OneLineParser(
        prog="python -m kvqueue",
        description="kvqueue-bench: validate, bench, quick, history, policy, check-queue, "
        "regress, report, diffs, sync-notebooks, make-vars (`python -m kvqueue COMMAND --help` "
        "for each).",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    _add_validate(sub)
    _add_bench(sub)
    _add_quick(sub)
    _add_history(sub)
    _add_policy(sub)
    _add_check_queue(sub)
    _add_regress(sub)
    _add_report(sub)
    _add_diffs(sub)
    p = sub.add_parser("sync-notebooks", help="regenerate the notebooks' parameters cells")
    p.set_defaults(func=_cmd_sync_notebooks)
    p = sub.add_parser(
        "make-vars",
        help="print the Make variables of every target (the Makefile's generated include)",
        description="Print, for each Make target that passes variables to its command, "
        "the variables (TARGET_VARS), their NAME ?= lines, their export to that target "
        "alone as KVQUEUE_NAME = $(value NAME) and the unexport of them all, from "
        "kvqueue.params.command_params. The Makefile writes this to .make/params.mk.",
    )
    p.set_defaults(func=_cmd_make_vars)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m kvqueue``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except BenchInputError as exc:
        command = argv[0] if argv and not argv[0].startswith("-") else ""
        print(f"{_prefix(command)}: {exc}", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
