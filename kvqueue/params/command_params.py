"""What each command of ``python -m kvqueue`` reads: its parameter fields, its own
defaults, the fields it reads only to refuse them, and the further Make variables it
reads (:data:`READS`).

The one declaration behind every command's options and ``--help``
(:mod:`kvqueue.__main__`), the ``KVQUEUE_<NAME>`` variables its ``--from-env`` reads, and
the Makefile's variables of each target, which ``python -m kvqueue make-vars``
(:mod:`~kvqueue.params.make_vars`) writes from it. A command that reads a variable is the
Make target of the same name (``make bench`` runs ``python -m kvqueue bench --from-env``).

Standard library only: ``python -m kvqueue`` imports this under a bare interpreter.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvqueue.params import (
    bench_params,
    check_queue_params,
    history_params,
    lock_params,
    policy_params,
    regression_params,
    report_params,
)
from kvqueue.params.spec import assignment_text, default_of, parse_texts, spec_of

#: Make variable of the raw data's root (``KVQUEUE_RAW_DIR`` with ``--from-env``).
RAW_DIR = "RAW_DIR"
#: The raw data's root when ``RAW_DIR`` is empty (relative to the repository root).
RAW_DIR_DEFAULT = "data/raw"
#: Make's own value of a variable where it is not empty. Every other variable is empty
#: in Make, which the command reads as "the field's default" (so QUICK still shrinks
#: what nobody chose); RAW_DIR has a value because the report rule lists its files.
MAKE_DEFAULTS: dict[str, str] = {RAW_DIR: RAW_DIR_DEFAULT}


@dataclass(frozen=True)
class Reads:
    """The parameters of one command.

    Attributes
    ----------
    fields
        Parameter fields (:mod:`kvqueue.params`), in the order they are listed: one
        option each (but the refused ones) and, with a Make variable, one
        ``KVQUEUE_<NAME>`` that ``--from-env`` reads.
    defaults
        Defaults of this command where they differ from the fields' (shown in ``--help``).
    refused
        Names of fields that ``--from-env`` reads only to refuse them (no option).
    extra
        Further Make variables the command reads (``RAW_DIR``, ``RELEASES``).
    options
        Whether the fields are options (``validate`` reads them from the environment only).
    """

    fields: tuple[Any, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    options: bool = True

    def __post_init__(self) -> None:
        # A misspelt name would silently become an option instead of a refusal.
        unknown = set(self.refused) - {f.name for f in self.fields}
        assert not unknown, f"refused fields that are not fields: {sorted(unknown)}"

    def option_fields(self) -> tuple[Any, ...]:
        """The fields that are options, in order (none if :attr:`options` is false)."""
        if not self.options:
            return ()
        return tuple(f for f in self.fields if f.name not in self.refused)

    def read_fields(self) -> tuple[Any, ...]:
        """The fields that ``--from-env`` reads: those with a Make variable, in order."""
        return tuple(f for f in self.fields if spec_of(f).make)

    def refused_variables(self) -> list[str]:
        """The Make variables of the refused fields, in field order."""
        return [spec_of(f).make for f in self.read_fields() if f.name in self.refused]

    def variables(self) -> list[str]:
        """The Make variables, in field order, then the extra ones."""
        return [spec_of(f).make for f in self.read_fields()] + list(self.extra)


def _bench_fields(*leave_out: str) -> tuple[Any, ...]:
    return tuple(f for f in bench_params.bench_fields() if f.name not in leave_out)


#: ``WAIT``: read by every command that holds the machine lock (after its own fields).
_LOCK = tuple(lock_params.lock_fields())


#: What each command reads, every command of ``python -m kvqueue`` included.
READS: dict[str, Reads] = {
    # What `make bench` would gate: every bench variable but HOST, checked as for a bench.
    "validate": Reads(_bench_fields("host"), options=False),
    "bench": Reads((*_bench_fields(), *_LOCK), extra=(RAW_DIR,)),
    # Writes nothing (no HOST, RAW_DIR) and is never a QUICK run.
    "quick": Reads((*_bench_fields("host", "quick"), *_LOCK), bench_params.QUICK_LOOP_DEFAULTS),
    # Reads the variables it chooses itself, to refuse them when given.
    "history": Reads(
        (*_bench_fields(), *_LOCK),
        history_params.HISTORY_DEFAULTS,
        refused=history_params.CHOSEN,
        extra=(history_params.RELEASES, history_params.NEWEST, RAW_DIR),
    ),
    "policy": Reads((*policy_params.policy_fields(), *_LOCK), extra=(RAW_DIR,)),
    "report": Reads(tuple(report_params.report_fields()), extra=(RAW_DIR,)),
    # Counts without the machine lock (no WAIT).
    "check-queue": Reads(tuple(check_queue_params.check_queue_fields())),
    # Its own fields, then the bench fields a count of two sources shares.
    "regress": Reads(
        (*regression_params.regress_fields(), *_LOCK), regression_params.REGRESS_DEFAULTS
    ),
    "diffs": Reads(extra=(RAW_DIR,)),
    "sync-notebooks": Reads(),
    "make-vars": Reads(),
}


def reads(command: str) -> list[str]:
    """The Make variables that ``command`` reads (as ``KVQUEUE_<NAME>``, with ``--from-env``).

    ``make help`` lists the same per target, the Makefile exports exactly these to it
    (both generated by :mod:`~kvqueue.params.make_vars`), and the command's ``--help``
    names each.
    """
    return READS[command].variables()


def not_defaults(command: str, texts: Mapping[str, str | None], **extra: str) -> str:
    """The line a run prints before it measures: the parameters that differ from
    ``command``'s defaults, as ``NAME=value`` (``extra``: further Make variables given,
    such as ``RAW_DIR``, shown when not empty).

    A mistyped variable is refused by Make, but a value that parses (``PROCESSES=2``
    meant for another run) is only seen here, before minutes are spent on it.
    """
    declared = READS[command]
    values = parse_texts(declared.fields, texts)
    shown = []
    for f in declared.fields:
        if f.name in values and values[f.name] != declared.defaults.get(f.name, default_of(f)):
            text = assignment_text(values[f.name]) or ""
            shown.append(f"{spec_of(f).make or f.name}={shlex.quote(text)}")
    shown += [f"{name}={shlex.quote(text)}" for name, text in extra.items() if text]
    return "parameters not at their defaults: " + (" ".join(shown) if shown else "none")
