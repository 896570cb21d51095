"""How a parameter is declared, read and written: the :class:`Spec` that every
parameter field carries (its Make variable, its help, its kind), the parsing of its text
(from an option or from ``KVQUEUE_<MAKE VARIABLE>``), its Make assignment, and its line in
a notebook's ``parameters`` cell.

Standard library only: ``python -m kvqueue`` imports this under a bare interpreter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from kvqueue import hostinfo
from kvqueue.errors import BenchInputError

#: Prefix of the environment variables through which ``make`` hands its variables to
#: ``python -m kvqueue ... --from-env``: values travel verbatim, never through a shell.
ENV_PREFIX = "KVQUEUE_"
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("", "0", "no", "false", "off")
#: The type a notebook's ``parameters`` cell declares for each :attr:`Spec.kind`.
NOTEBOOK_TYPES = {
    "str": "str",
    "int": "int",
    "float": "float",
    "bool": "bool",
    "words": "list[str]",
    "ints": "list[int]",
    "pairs": "list[list[str]]",
}


@dataclass(frozen=True)
class Spec:
    """How one parameter is named outside Python and how its text is read.

    Attributes
    ----------
    make
        The Make variable (and, with :data:`ENV_PREFIX`, the environment variable);
        ``None`` for a parameter that only an option sets (the report's settings).
    help
        One line for ``--help``, ``make help`` and the notebook's ``parameters`` cell.
    kind
        ``str``, ``int``, ``float``, ``bool``, ``words`` (space-separated strings),
        ``ints`` (space-separated whole numbers) or ``pairs`` (``(candidate, baseline)``
        label pairs, given one pair per option).
    """

    make: str | None
    help: str
    kind: str = "str"


def param(default: Any, make: str | None, help: str, kind: str = "str") -> Any:
    """A dataclass field with a default and its :class:`Spec`."""
    return field(default=default, metadata={"spec": Spec(make, help, kind)})


def spec_of(f: Any) -> Spec:
    """The :class:`Spec` of a parameter field (a dataclass field made by :func:`param`)."""
    return f.metadata["spec"]


def default_of(f: Any) -> Any:
    """The default value of a dataclass field."""
    return f.default if f.default is not MISSING else f.default_factory()


# ------------------------------------------------------------------ text -> value


def parse_value(name: str, spec: Spec, text: str | bool) -> Any:
    """Turn the text of one parameter (CLI or environment) into its value.

    Raises
    ------
    BenchInputError
        With a one-line reason naming the parameter.
    """
    if spec.kind == "bool":
        if isinstance(text, bool):
            return text
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise BenchInputError(f"{name} must be 1 or 0 (yes/no), got {text!r}")
    assert isinstance(text, str)
    if spec.kind == "words":
        return tuple(text.split())
    if spec.kind == "ints":
        try:
            return tuple(int(x) for x in text.split())
        except ValueError:
            raise BenchInputError(f"{name} must be whole numbers, got {text!r}") from None
    if spec.kind == "int":
        try:
            return int(text)
        except ValueError:
            raise BenchInputError(f"{name} must be a whole number, got {text!r}") from None
    if spec.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise BenchInputError(f"{name} must be a number, got {text!r}") from None
    return text


def parse_texts(fields: Iterable[Any], given: Mapping[str, str | bool | None]) -> dict[str, Any]:
    """Parse texts keyed by field name into values; ``None`` (not given) is dropped.

    Parameters
    ----------
    fields
        The parameter fields the texts may name.
    given
        Texts keyed by field name.

    Raises
    ------
    BenchInputError
        An unknown name, or the first text that does not parse.
    """
    specs = {f.name: spec_of(f) for f in fields}
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise BenchInputError(f"unknown parameter(s): {', '.join(unknown)}")
    return {k: parse_value(k, specs[k], v) for k, v in given.items() if v is not None}


def environment_texts(fields: Iterable[Any], environ: Mapping[str, str]) -> dict[str, str | None]:
    """The text of every field from ``KVQUEUE_<MAKE VARIABLE>``; empty or unset: ``None``.

    This is how ``make`` passes its variables: verbatim, so that no value is ever
    evaluated by a shell. An empty variable means "the default" (so QUICK's defaults
    still apply to it).
    """
    out: dict[str, str | None] = {}
    for f in fields:
        text = environ.get(ENV_PREFIX + spec_of(f).make, "")
        out[f.name] = text if text.strip() else None
    return out


# ------------------------------------------------------------------ value -> text


def assignment_text(value: Any) -> str | None:
    """The text of a Make assignment that gives ``value`` back through
    :func:`parse_value`; ``None`` for no value (``None`` or ``''``: the default)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def make_assignments(
    fields: Iterable[Any],
    record: Mapping[str, Any],
    skip: Iterable[str] = (),
    legacy: Mapping[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """The Make assignments that give ``record``'s values back (a run's ``run.json``
    ``parameters``), in field order, every field but ``skip`` written out; a field the
    record lacks takes its ``legacy`` value or is left out (the default).

    Returns
    -------
    list of (str, str)
        ``(MAKE_VARIABLE, text)``; texts parse back with :func:`parse_value`.
    """
    out = []
    for f in fields:
        if f.name in skip:
            continue
        text = assignment_text(record.get(f.name, (legacy or {}).get(f.name)))
        if text is not None:  # no value means the default, which is what the run used
            out.append((spec_of(f).make, text))
    return out


def literal(value: Any) -> str:
    """A default as the Python literal of a notebook's ``parameters`` cell."""
    if isinstance(value, tuple):
        value = [list(v) if isinstance(v, tuple) else v for v in value]
    if isinstance(value, (str, list, dict)):
        return json.dumps(value)
    return repr(value)


def cell_line(name: str, kind: str, default: Any, help_: str) -> str:
    """One ``name: type = literal  # help`` line that papermill can parse.

    papermill's parser skips any line with more than one ``=``, and the default variants
    and pairs are version pins (``vllm==0.32.0``): such a default is written as an empty
    list, which :func:`kvqueue.params.bench_params.from_notebook` and
    :meth:`kvqueue.params.report_params.ReportSettings.from_dict` read as "the default".
    """
    assert "=" not in help_, f"papermill cannot parse a help with '=': {help_}"
    text = literal(default)
    if "=" in text:
        text, help_ = "[]", f"{help_} ([]: the default, see --help)"
    return f"{name}: {kind} = {text}  # {help_}"


def field_cell_line(f: Any) -> str:
    """The ``parameters`` cell line of a parameter field: its type, default and help."""
    spec = spec_of(f)
    return cell_line(f.name, NOTEBOOK_TYPES[spec.kind], default_of(f), spec.help)


def resolve_in_repo(path: str | Path) -> Path:
    """A notebook path parameter: absolute as given, relative to the repository root."""
    p = Path(path)
    return p if p.is_absolute() else hostinfo.PROJECT_DIR / p
