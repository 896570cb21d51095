"""The parameters of a release-history run (``make history``): the bench parameters with
the history's defaults (:data:`HISTORY_DEFAULTS`), less the ones the history chooses
itself (:data:`CHOSEN`), and the releases to time (``RELEASES``). The run itself is
:mod:`kvqueue.history.history_collect`'s; the report reads :data:`HISTORY_DEFAULTS` to tell a
full history from a reduced one.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.params import bench_params
from kvqueue.params.spec import ENV_PREFIX, spec_of
from kvqueue.schema import pin_git_ref

#: Make variable with the releases to time ('' = every release with the queue).
RELEASES = "RELEASES"
#: Environment variable (Make ``RELEASES``) with the releases to time ('' = all).
RELEASES_ENV = ENV_PREFIX + RELEASES
#: Help of ``RELEASES``.
RELEASES_HELP = "releases to time, space separated ('': every release with the queue)"
#: Make variable with a source of the user's to time as the history's newest point.
NEWEST = "NEWEST"
#: Environment variable (Make ``NEWEST``).
NEWEST_ENV = ENV_PREFIX + NEWEST
#: Help of ``NEWEST``.
NEWEST_HELP = (
    "a source of your own timed as the newest point after the releases, e.g. "
    "mine=git:~/vllm@mine ('': none)"
)
#: What a history run changes in the bench defaults, unless a value is given. A process
#: with 17 versions x 4 cases x 9 samples of 20 ms takes ~20 s here, so the pilot of 11
#: is ~4 minutes and MAX_MINUTES caps the whole run (gate included) at ~18.
HISTORY_DEFAULTS: dict[str, Any] = {
    "cases": ("alloc1", "alloc8", "mix", "remove"),
    "pools": (100_000,),
    "confirm_processes": 0,
    "block_mode": "own",
    "max_minutes": 17.0,
    "max_processes": 41,
}
#: The same for ``SUBJECT=pool`` (a history of vLLM's ``BlockPool``): vLLM's own loop at
#: three of its sizes and the caching churn, on upstream's benchmark pool of 100,000
#: blocks; each pool uses its own release's block class (``BLOCK_MODE`` is the queue's).
POOL_HISTORY_DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in HISTORY_DEFAULTS.items() if k != "block_mode"},
    "subject": schema.SUBJECT_POOL,
    "cases": ("loop10", "loop100", "loop1000", "churn"),
}


#: The same for ``SUBJECT=manager``: three sweep sizes and the serving stream on a
#: 2,048-block pool (the sweeps' prompts cycle through twice the pool: a 100,000-block
#: pool would hold 20,000 prompts per case in every process).
MANAGER_HISTORY_DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in HISTORY_DEFAULTS.items() if k != "block_mode"},
    "subject": schema.SUBJECT_MANAGER,
    "cases": ("sweep10", "sweep100", "sweep1000", "stream"),
    "pools": (2048,),
}
_STACK_HISTORY_DEFAULTS = {
    schema.SUBJECT_POOL: POOL_HISTORY_DEFAULTS,
    schema.SUBJECT_MANAGER: MANAGER_HISTORY_DEFAULTS,
}


def history_defaults(subject: str | None) -> dict[str, Any]:
    """:data:`HISTORY_DEFAULTS`, or a stack subject's (pool, manager)."""
    return _STACK_HISTORY_DEFAULTS.get(str(subject), HISTORY_DEFAULTS)


#: Bench fields that the history chooses: given, they are refused.
CHOSEN = ("variants", "aa", "block_source", "quick")


def from_text(texts: Mapping[str, str | None]) -> bench_params.BenchParams:
    """Bench parameters of a history run from the bench variables' texts.

    ``VARIANTS``, ``AA`` and ``BLOCK_SOURCE`` are chosen by the history and refused, and
    so is a ``BLOCK_MODE`` other than ``own``; every other bench variable may be given
    and overrides :data:`HISTORY_DEFAULTS`.
    The variants are filled in by :func:`kvqueue.history.history_collect.run_history`.
    """
    for name in CHOSEN:
        if texts.get(name) is not None:
            make = spec_of(next(f for f in bench_params.bench_fields() if f.name == name)).make
            raise BenchInputError(f"{make} is chosen by make history, not given (use RELEASES)")
    given = bench_params.parse_texts(texts)
    stack = _STACK_HISTORY_DEFAULTS.get(str(given.get("subject")))
    if stack is not None:
        # Each stack runs its own release's block: BLOCK_MODE other than the recorded
        # `shared` is refused by the bench's own check.
        values = {**stack, **given}
        return bench_params.make_params(**{**values, "variants": ("vllm==0.0.0", "vllm==0.0.1")})
    if given.get("block_mode", "own") != "own":
        # Shared blocks would time versions that differ in their block class only with
        # the same code: their steps would be A/A noise labelled as release changes.
        raise BenchInputError("BLOCK_MODE must be own for make history (each release's block)")
    values = {**HISTORY_DEFAULTS, **given}
    # Two placeholder variants pass the value checks; run_history sets the real ones.
    return bench_params.make_params(**{**values, "variants": ("vllm==0.0.0", "vllm==0.0.1")})


def newest_from_text(text: str | None) -> str | None:
    """``NEWEST`` text -> the source to time after the releases (``None`` if empty).

    Raises
    ------
    BenchInputError
        More than one source, or a release (releases are chosen with ``RELEASES``).
    """
    words = (text or "").split()
    if not words:
        return None
    if len(words) > 1:
        raise BenchInputError(f"NEWEST takes one source, got {len(words)}: {text!r}")
    if words[0].split("=", 1)[-1].startswith("vllm==") or words[0].startswith("vllm=="):
        raise BenchInputError("NEWEST is a source of your own; releases go in RELEASES")
    return words[0]


def make_assignments(
    parameters: Mapping[str, Any],
    history: Mapping[str, Any],
    commits: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The Make variables that repeat a history run: its bench ``parameters`` as
    :func:`kvqueue.params.bench_params.make_assignments` writes them (``VARIANTS`` and ``AA``,
    ``BLOCK_SOURCE`` and ``QUICK``, which the history chooses, left out), ``RELEASES``
    when the run was given its releases, and ``NEWEST`` when it timed a source of the
    user's.

    Parameters
    ----------
    parameters
        ``run.json`` ``parameters``.
    history
        ``run.json`` ``history`` (``releases_given``, ``releases_probed``, ``versions``).
    commits
        Source -> the commit a ``git:REPO@REF`` source was read at: ``NEWEST``'s ref is
        pinned to it (a branch names another commit tomorrow).
    """
    chosen = {spec_of(f).make for f in bench_params.bench_fields() if f.name in CHOSEN}
    out = [
        (var, text) for var, text in bench_params.make_assignments(parameters) if var not in chosen
    ]
    if history.get("releases_given"):
        out.append((RELEASES, " ".join(str(r) for r in history.get("releases_probed", []))))
    own = [v for v in history.get("versions", []) if v.get("source")]
    if own:
        label, given = str(own[0].get("label", "")), str(own[0]["source"])
        source = pin_git_ref(given, (commits or {}).get(given))
        if label == given:
            label = source
        out.append((NEWEST, source if label in ("", source) else f"{label}={source}"))
    return out
