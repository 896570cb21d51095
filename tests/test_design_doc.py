"""The design documents name only what exists (``docs/*.md``).

- every dotted name ``kvqueue.…`` / ``methods.…`` is a module, or an attribute of one
  (resolved by importing the longest module prefix and ``getattr`` on the rest);
- every short name in backticks whose first part is a module or package of the project
  (``runner.run_bench``: module names are unique, ``tests/test_architecture.py``) resolves
  the same way;
- every path ``kvqueue/…``, ``methods/…``, ``tests/…``, ``notebooks/…`` exists;
- every relative link between the documents (and from ``README.md``) reaches a file and,
  with ``#anchor``, one of its headings;
- every "docs/design.md §N" cited by the code, the tests, ``README.md`` or the
  ``Makefile`` is a section of ``docs/design.md``;
- ``docs/design.md`` is a map a newcomer reads in ten minutes: at most 400 lines.

A name followed by ``<`` or ``{`` is a pattern (``kvqueue._variants.v<N>_<Class>``), not
checked. Nothing is run but imports.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
DESIGN = DOCS / "design.md"
MAX_DESIGN_LINES = 400
PACKAGES = ("kvqueue", "methods")

#: ``kvqueue.a.b`` / ``methods.a.b`` anywhere in the text.
_DOTTED = re.compile(r"(?<![\w./-])((?:kvqueue|methods)(?:\.[A-Za-z_]\w*)+)")
#: A short dotted name that is a whole backticked span: ``runner.run_bench`` (or ``…()``).
_SHORT = re.compile(r"`([a-z_][a-z0-9_]*)((?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
#: File names, not attributes: ``run.json``, ``report.html``, ...
_FILE_SUFFIXES = {"csv", "json", "png", "md", "py", "ipynb", "jsonl", "txt", "pkl", "html"}
_PATH = re.compile(r"(?<![\w./-])((?:kvqueue|methods|tests|notebooks)/[\w./*-]*[\w*])")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CITED_SECTION = re.compile(r"docs/design\.md\W{0,4}§\s*(\d+)")


def _docs() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _is_pattern(text: str, end: int) -> bool:
    return text[end : end + 1] in ("<", "{")


@cache
def _module_names() -> dict[str, tuple[str, ...]]:
    """Last part of every module and package name -> the dotted names that have it."""
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(parts[-1], []).append(".".join(parts))
    return {k: tuple(v) for k, v in found.items()}


@cache
def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute (chain) of the longest module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name and not ".".join(parts[:cut]).startswith(exc.name):
                raise  # the module exists but imports something missing: not a doc problem
            continue
        break
    else:
        return False
    for attr in parts[cut:]:
        fields = getattr(obj, "__dataclass_fields__", {})
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif attr in fields:  # a dataclass field without a default
            obj = fields[attr]
        else:
            return False
    return True


def dotted_names(text: str) -> set[str]:
    """The full dotted names a text mentions."""
    return {m.group(1) for m in _DOTTED.finditer(text) if not _is_pattern(text, m.end())}


def short_names(text: str) -> set[str]:
    """Backticked ``module.attr`` names whose module part is one project module or
    package, as full dotted names (``runner.run_bench`` -> ``kvqueue.measure.runner.run_bench``)."""
    out = set()
    for m in _SHORT.finditer(text):
        base, rest = m.group(1), m.group(2)
        if base in PACKAGES or rest.rsplit(".", 1)[-1] in _FILE_SUFFIXES:
            continue
        owners = _module_names().get(base, ())
        if len(owners) == 1:
            out.add(owners[0] + rest)
    return out


def missing_names(text: str) -> list[str]:
    return sorted(n for n in dotted_names(text) | short_names(text) if not resolves(n))


def missing_paths(text: str) -> list[str]:
    bad = []
    for m in _PATH.finditer(text):
        path = m.group(1)
        if _is_pattern(text, m.end()):
            continue
        found = list(REPO.glob(path)) if "*" in path else (REPO / path).exists()
        if not found:
            bad.append(path)
    return sorted(set(bad))


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # no headings inside code blocks
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            bad.append(target)
    return bad


def design_sections() -> set[str]:
    return set(re.findall(r"^## (\d+) ", DESIGN.read_text(encoding="utf-8"), flags=re.M))


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_every_dotted_name_exists(doc: Path) -> None:
    assert not missing_names(doc.read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_every_path_exists(doc: Path) -> None:
    assert not missing_paths(doc.read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", [*_docs(), REPO / "README.md"], ids=lambda p: p.name)
def test_every_link_reaches_its_file_and_heading(doc: Path) -> None:
    assert not broken_links(doc)


def test_design_is_a_short_map() -> None:
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_DESIGN_LINES, len(lines)


def test_every_cited_section_exists() -> None:
    sections = design_sections()
    sources = [
        *(p for d in ("kvqueue", "methods", "tests") for p in sorted((REPO / d).rglob("*.py"))),
        REPO / "README.md",
        REPO / "Makefile",
    ]
    bad = []
    for path in sources:
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for cited in _CITED_SECTION.findall(line):
                if cited not in sections:
                    bad.append(f"{path.relative_to(REPO)}:{number} cites §{cited}")
    assert not bad, bad


def test_the_checks_catch_stale_names() -> None:
    """The checks fail on what the restructuring made stale (so the tests above can)."""
    stale = (
        "`kvqueue.render.report` and `kvqueue.ab.ab_analysis.headline_run` and "
        "`runner.no_such_function` and `stats.MIN_PROCESSES`, in `kvqueue/block.py`; "
        "fine: `kvqueue.ab.ab_analysis.headline_runs`, `runner.run_bench`, `run.json`, "
        "`kvqueue._variants.v<N>_<Class>`, `kvqueue/subjects/*.py`"
    )
    assert missing_names(stale) == [
        "kvqueue.ab.ab_analysis.headline_run",
        "kvqueue.measure.runner.no_such_function",
        "kvqueue.render.report",
        "kvqueue.stats.MIN_PROCESSES",
    ]
    assert missing_paths(stale) == ["kvqueue/block.py"]
    assert slug("8 Module map") == "8-module-map"
    assert slug("The A/A bias and the calibration") == "the-aa-bias-and-the-calibration"
