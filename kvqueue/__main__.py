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
``sync-notebooks``
    regenerate the notebooks' ``parameters`` cells from :mod:`kvqueue.params`.

The options of ``bench`` and ``report`` are generated from the fields of
:class:`kvqueue.params.BenchParams` and :class:`kvqueue.params.ReportSettings`. Each
command imports what it needs when it runs (as pyperf's ``__main__`` does): ``validate``
and ``bench`` up to the notebook are standard library only and run on a bare
interpreter, ``report`` needs the project's virtual environment.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

from kvqueue import params
from kvqueue.errors import BenchError, BenchInputError, GateRefused

_SOURCES_HELP = "vllm==X.Y.Z | FILE[::Class] | git:REPO@REF | kvqueue | kvqueue:floor"


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors become one-line BenchInputErrors (``make bench: ...``)."""

    def error(self, message: str) -> NoReturn:
        raise BenchInputError(message)


# ------------------------------------------------------------------ validate


def _cmd_validate(args: argparse.Namespace) -> int:
    import json

    from kvqueue import child
    from kvqueue.gate import gate
    from kvqueue.sources import loader

    child.die_with_parent()  # when started by the runner (a no-op by hand)
    if sys.flags.optimize:
        print(
            f"kvqueue validate: {sys.executable} runs with -O (sys.flags.optimize="
            f"{sys.flags.optimize}): asserts are stripped, the gate would check nothing",
            file=sys.stderr,
        )
        return 2
    sources = list(args.sources)
    block_source = args.block_source
    if args.from_env:
        # What `make bench` would gate: its variants (and A/A copy), ops and pool sizes.
        try:
            bench = params.from_environment({**os.environ, params.ENV_PREFIX + "HOST": "x"})
        except BenchInputError as exc:
            print(f"kvqueue validate: {exc}", file=sys.stderr)
            return 2
        sources, block_source = bench.sources, bench.block_source or None
        args.block_mode = bench.block_mode
        args.ops = bench.gate_ops
        args.sizes = tuple(sorted({params.MIN_POOL, *bench.pools}))
    if not sources:
        print("kvqueue validate: give at least one SOURCE (or --from-env)", file=sys.stderr)
        return 2
    try:
        variants = loader.load_variants(
            sources, block_source=block_source or None, block_mode=args.block_mode
        )
    except loader.SourceError as exc:
        print(f"kvqueue validate: {exc}", file=sys.stderr)
        return 2
    results = gate.gate(
        variants, ops=args.ops, seed=args.seed, sizes=args.sizes, invalid=args.invalid_ops
    )
    if args.json:
        records = [
            {**r.__dict__, "provenance": v.provenance()}
            for r, v in zip(results, variants, strict=True)
        ]
        doc = {"seed": args.seed, "ops": args.ops, "sizes": list(args.sizes), "results": records}
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
    from kvqueue.gate import model, sizes

    p = sub.add_parser("validate", help="run the validation gate; the first source is the baseline")
    p.add_argument("sources", nargs="*", metavar="SOURCE", help=_SOURCES_HELP)
    p.add_argument(
        "--ops",
        type=int,
        default=model.DEFAULT_OPS,
        help="random operations per variant (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=model.DEFAULT_SEED, help="seed (default %(default)s)"
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
        default=sizes.DEFAULT_SIZES,
        help="queue sizes of the timed-size model check, space or comma separated "
        f"(default {' '.join(map(str, sizes.DEFAULT_SIZES))})",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"gate what `make bench` would gate: {params.ENV_PREFIX}VARIANTS, AA, GATE_OPS, "
        "POOLS and BLOCK_SOURCE (how `make validate` passes them)",
    )
    p.set_defaults(func=_cmd_validate)


# ------------------------------------------------------------------ bench


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_param_options(
    p: argparse.ArgumentParser, defaults: dict[str, object] | None = None, skip: tuple = ()
) -> None:
    """One option per :class:`kvqueue.params.BenchParams` field, with its help."""
    for f in params.bench_fields():
        if f.name in skip:
            continue
        spec = params.spec_of(f)
        default = (defaults or {}).get(f.name, params.default_of(f))
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        text = spec.help.replace("%", "%%")  # argparse formats help with %
        help_ = f"{text} [{spec.make}; default: {shown!s}]"
        if spec.kind == "bool":
            p.add_argument(_option(f.name), action="store_const", const=True, help=help_)
        else:
            p.add_argument(_option(f.name), metavar=spec.make, help=help_)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="collect one run into data/raw/<host>/<run-id>/",
        description="Collect one run of the timing protocol. Every option is also a Make "
        "variable of `make bench` (shown in brackets).",
    )
    _add_param_options(p)
    p.add_argument(
        "--raw-dir", type=Path, default=None, help="root of the raw data [RAW_DIR; data/raw]"
    )
    p.add_argument(
        "--no-notebook",
        action="store_true",
        help="run the protocol directly instead of through notebooks/bench.ipynb",
    )
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"read every parameter from {params.ENV_PREFIX}<MAKE VARIABLE> (how `make bench` "
        "passes them: verbatim, never through a shell)",
    )
    p.set_defaults(func=_cmd_bench)


def _bench_params(args: argparse.Namespace) -> params.BenchParams:
    if args.from_env:
        given = [f.name for f in params.bench_fields() if getattr(args, f.name) is not None]
        if given:
            raise BenchInputError(f"--from-env takes no other parameter (got {_option(given[0])})")
        return params.from_environment(os.environ)
    return params.from_text({f.name: getattr(args, f.name) for f in params.bench_fields()})


def _cmd_bench(args: argparse.Namespace) -> int:
    from kvqueue import schema

    os.environ[params.BUDGET_START_ENV] = repr(time.time())  # MAX_MINUTES counts from here
    try:
        raw_text = args.raw_dir or (
            os.environ.get(params.ENV_PREFIX + "RAW_DIR", "") if args.from_env else ""
        )
        raw_dir = Path(raw_text or params.resolve_in_repo("data/raw")).resolve()
        checked = params.check(_bench_params(args))  # the one place input is checked
        run_id = schema.new_run_id(checked.python["tag"])
        if args.no_notebook:
            from kvqueue.bench import runner

            runner.run_bench(checked, raw_dir, run_id)
        else:
            from kvqueue.bench import notebook

            notebook.run_bench_notebook(checked, raw_dir, run_id)
    except (BenchInputError, GateRefused, BenchError, KeyboardInterrupt) as exc:
        return _exit_status("make bench", exc)
    return 0


def _exit_status(command: str, exc: BaseException) -> int:
    """Print a bench-side error in one line; 2 bad input, 1 refused or failed, 130 Ctrl-C."""
    if isinstance(exc, KeyboardInterrupt):
        return 130
    print(f"{command}: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, BenchInputError) else 1


# ------------------------------------------------------------------ quick


def _add_quick(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quick",
        help="a fast A/B loop: gate, paired processes, the comparison in the terminal",
        description="Gate and time the variants with small defaults and print the "
        "comparison; nothing is written under data/raw (evidence is `make bench`).",
    )
    _add_param_options(p, params.QUICK_LOOP_DEFAULTS, skip=("host", "quick"))
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"read the parameters from {params.ENV_PREFIX}<MAKE VARIABLE> (`make quick`)",
    )
    p.set_defaults(func=_cmd_quick)


def _cmd_quick(args: argparse.Namespace) -> int:
    names = [f.name for f in params.bench_fields() if f.name not in ("host", "quick")]
    try:
        if args.from_env:
            texts = params.environment_texts(os.environ)
        else:
            texts = {n: getattr(args, n) for n in names}
        given = params.parse_texts({n: texts[n] for n in names})
        from kvqueue.bench import quick

        quick.run_quick(quick.quick_params(given))
    except (BenchInputError, GateRefused, BenchError, KeyboardInterrupt) as exc:
        return _exit_status("make quick", exc)
    return 0


# ------------------------------------------------------------------ history


def _add_history(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "history",
        help="time every distinct queue version of vLLM's releases into data/raw/<host>/",
        description="A bench run over vLLM's release history (kvqueue.history.collect): every "
        "release from the first with the V1 free-block queue to the newest (or RELEASES), "
        "each distinct class version once, own block classes, paired protocol. Reads the "
        "bench variables from the environment (how `make history` passes them).",
    )
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"read the parameters from {params.ENV_PREFIX}<MAKE VARIABLE> and "
        f"{params.ENV_PREFIX}RELEASES (`make history`)",
    )
    p.add_argument("--releases", default=None, help="releases to time, space separated [RELEASES]")
    p.add_argument("--host", default=None, help="label of this machine [HOST]")
    p.add_argument("--python", default=None, help="interpreter to measure [PYTHON]")
    p.add_argument("--raw-dir", type=Path, default=None, help="root of the raw data [RAW_DIR]")
    p.set_defaults(func=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:
    from kvqueue.history import collect as history_collect

    # MAX_MINUTES budgets the whole command: the release listing and fetches included.
    os.environ[params.BUDGET_START_ENV] = repr(time.time())
    try:
        if args.from_env:
            texts = params.environment_texts(os.environ)
            releases_text = os.environ.get(history_collect.RELEASES_ENV, "")
            raw_text = os.environ.get(params.ENV_PREFIX + "RAW_DIR", "")
        else:
            texts = {f.name: None for f in params.bench_fields()}
            texts.update(host=args.host, python=args.python)
            releases_text, raw_text = args.releases or "", ""
        raw_dir = Path(args.raw_dir or raw_text or params.resolve_in_repo("data/raw")).resolve()
        bench = history_collect.history_params(texts)
        history_collect.run_history(
            bench, history_collect.releases_from_text(releases_text), raw_dir
        )
    except (BenchInputError, GateRefused, BenchError, KeyboardInterrupt) as exc:
        return _exit_status("make history", exc)
    return 0


# ------------------------------------------------------------------ policy


def _add_policy(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "policy",
        help="allocation policies on a churn workload into data/raw/<host>/<run-id>/",
        description="Check and time the allocation policies (lru and the contiguous-run "
        "policy per window factor) on the seeded churn workload. Every option is also a "
        "Make variable of `make policy` (shown in brackets).",
    )
    for f in params.policy_fields():
        spec = params.spec_of(f)
        default = params.default_of(f)
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        text = spec.help.replace("%", "%%")
        p.add_argument(
            _option(f.name), metavar=spec.make, help=f"{text} [{spec.make}; default: {shown!s}]"
        )
    p.add_argument(
        "--raw-dir", type=Path, default=None, help="root of the raw data [RAW_DIR; data/raw]"
    )
    p.add_argument(
        "--from-env",
        action="store_true",
        help=f"read every parameter from {params.ENV_PREFIX}<MAKE VARIABLE> (`make policy`)",
    )
    p.set_defaults(func=_cmd_policy)


def _cmd_policy(args: argparse.Namespace) -> int:
    from kvqueue import schema
    from kvqueue.policy import collect as policy_collect

    names = [f.name for f in params.policy_fields()]
    try:
        if args.from_env:
            given = [n for n in names if getattr(args, n) is not None]
            if given:
                raise BenchInputError(
                    f"--from-env takes no other parameter (got {_option(given[0])})"
                )
            texts = params.policy_environment_texts(os.environ)
        else:
            texts = {n: getattr(args, n) for n in names}
        raw_text = args.raw_dir or (
            os.environ.get(params.ENV_PREFIX + "RAW_DIR", "") if args.from_env else ""
        )
        raw_dir = Path(raw_text or params.resolve_in_repo("data/raw")).resolve()
        checked, info = params.check_policy(params.policy_from_text(texts))
        run_id = schema.new_run_id(info["tag"], schema.KIND_POLICY)
        policy_collect.run_policy(checked, info, raw_dir, run_id)
    except (BenchInputError, GateRefused, BenchError, KeyboardInterrupt) as exc:
        return _exit_status("make policy", exc)
    return 0


# ------------------------------------------------------------------ report


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild data/processed and render the HTML report and the PR writeup",
        description="Build data/processed and render the HTML report and the PR writeup.",
    )
    for name, (default, help_) in params.REPORT_PATHS.items():
        if name != "figures_dir":  # figures go to <out>/figures
            p.add_argument(
                _option(name), type=Path, default=params.resolve_in_repo(default), help=help_
            )
    p.add_argument(
        "--out", type=Path, default=params.resolve_in_repo("reports"), help="report folder"
    )
    p.add_argument("--notebook", type=Path, default=None, help="report notebook to run")
    for f in fields(params.ReportSettings):
        default = params.default_of(f)
        text = f.metadata["help"].replace("%", "%%")  # argparse formats help with %
        help_ = f"{text} (default: %(default)s)"
        if f.name == "pairs":
            shown = "; ".join(f"{c} vs {b}" for c, b in default)
            p.add_argument(
                "--pair",
                dest="pairs",
                nargs=2,
                action="append",
                metavar=("CANDIDATE", "BASELINE"),
                help=f"{text} (repeatable; default: {shown})",
            )
        else:
            p.add_argument(_option(f.name), type=type(default), default=default, help=help_)
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from kvqueue.report import build

    values = {f.name: getattr(args, f.name) for f in fields(params.ReportSettings)}
    if values["pairs"] is None:
        values.pop("pairs")
    settings = params.ReportSettings.from_dict(values)
    # Given paths are relative to the current folder, as on any command line.
    return build.report(
        raw_dir=args.raw_dir.resolve(),
        processed_dir=args.processed_dir.resolve(),
        out=args.out.resolve(),
        settings=settings,
        notebook=args.notebook,
    )


# ------------------------------------------------------------------ sync-notebooks


def _cmd_sync_notebooks(_args: argparse.Namespace) -> int:
    from kvqueue.bench import notebook

    changed = notebook.sync_parameters_cells()
    for path in changed:
        print(f"rewrote the parameters cell of {path}")
    if not changed:
        print("notebooks: parameters cells are up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The one parser of ``python -m kvqueue`` (all subcommands)."""
    parser = _OneLineParser(
        prog="python -m kvqueue",
        description="kvqueue-bench: validate, bench, quick, policy, report, sync-notebooks "
        "(`python -m kvqueue COMMAND --help` for each).",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    _add_validate(sub)
    _add_bench(sub)
    _add_quick(sub)
    _add_history(sub)
    _add_policy(sub)
    _add_report(sub)
    p = sub.add_parser("sync-notebooks", help="regenerate the notebooks' parameters cells")
    p.set_defaults(func=_cmd_sync_notebooks)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m kvqueue``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except BenchInputError as exc:
        command = argv[0] if argv and not argv[0].startswith("-") else ""
        prefix = f"make {command}" if command in ("bench", "quick", "policy") else "kvqueue"
        prefix = f"kvqueue {command}" if command and prefix == "kvqueue" else prefix
        print(f"{prefix}: {exc}", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
