"""Command line: ``python -m kvqueue validate SOURCE [SOURCE ...]`` (and ``bench``).

``validate`` uses the standard library only, so it runs under any CPython >= 3.10.
"""

from __future__ import annotations

import argparse
import json
import sys

from kvqueue import loader, validate


def _cmd_validate(args: argparse.Namespace) -> int:
    try:
        variants = loader.load_variants(args.sources, block_source=args.block_source)
    except loader.SourceError as exc:
        print(f"kvqueue validate: {exc}", file=sys.stderr)
        return 2
    results = validate.gate(variants, ops=args.ops, seed=args.seed)
    if args.json:
        records = [
            {**r.__dict__, "provenance": v.provenance()}
            for r, v in zip(results, variants, strict=True)
        ]
        print(json.dumps({"seed": args.seed, "ops": args.ops, "results": records}))
    else:
        print(
            f"validation gate: seed {args.seed}, baseline {variants[0].label}, "
            f"block class from {variants[0].block_src.source}"
        )
        for result in results:
            print(result.line())
            if result.error:
                print("      " + result.error.replace("\n", "\n      "))
    failed = [r.label for r in results if not r.ok]
    if failed and not args.json:
        print(f"refused: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m kvqueue``.

    ``bench`` and ``report`` are forwarded to their modules (imported lazily: ``report``
    needs the analysis stack, ``validate`` must run on a bare interpreter).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":
        from kvqueue.runner import main as bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "report":
        from kvqueue.render import main as report_main

        return report_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m kvqueue", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bench", help="collect a run (see: python -m kvqueue bench --help)")
    sub.add_parser("report", help="render the report (see: python -m kvqueue report --help)")
    p = sub.add_parser("validate", help="run the validation gate; the first source is the baseline")
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="vllm==X.Y.Z | FILE[::Class] | git:REPO@REF | kvqueue | kvqueue:floor",
    )
    p.add_argument(
        "--ops",
        type=int,
        default=validate.DEFAULT_OPS,
        help="random operations per variant (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=validate.DEFAULT_SEED)
    p.add_argument(
        "--block-source",
        default=None,
        help="source of the shared KVCacheBlock class (default: the baseline)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=_cmd_validate)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
