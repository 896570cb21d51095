"""Load a release's vLLM modules without torch: the one loader every subject uses.

A subject (the ``BlockPool``, the ``KVCacheManager``) is a *root* module of vLLM and the
modules it imports. Loading it never imports vLLM itself; each ``vllm.*`` module a loaded
module imports is answered, in this order, by

1. the release's own file, read from the source (:func:`read_members`):

   - executed **whole**, byte for byte (``dont_inherit=True``: this package's
     ``from __future__ import annotations`` must not leak into vLLM's code, whose
     annotations are evaluated at definition time), or
   - **cut** (a module in ``cut``: ``kv_cache_utils``, the big ``vllm/utils`` modules):
     only the names the other loaded modules import from it, with every top-level
     definition they use, at their own line numbers (:func:`cut_definitions`), compiled
     with lazy annotations;

3. a *stub* (:class:`kvqueue.sources.stand_ins.StubModule`): every name is a placeholder
   that may be named (an annotation, a default) but raises when used, and records the
   use (:func:`kvqueue.sources.stand_ins.reached`), so the gate refuses a variant whose
   run reached one, naming it. Third-party packages (``torch``, ``numpy``) are stubs too.

The names each cut module must define are found before anything runs: every import
statement of every whole file (inside functions too), then, to a fixed point, the vLLM
names the chosen definitions of the cut modules import from each other.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations
import __future__

import ast
import builtins
import hashlib
import json
import sys
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvqueue.sources import stand_ins
from kvqueue.sources.fetch_errors import FetchError
from kvqueue.sources.loader import (
    BLOCK_CLASS,
    QUEUE_CLASS,
    ClassSource,
    SourceError,
    Variant,
    git_commit,
    git_show,
    load_variant,
)
from kvqueue.sources.release_fetch import fetch_members

_LAZY_ANNOTATIONS = __future__.annotations.compiler_flag
_counter = 0


class LoadError(ValueError):
    """A subject's modules cannot be read or loaded; one line naming what failed."""


def module_name(member: str) -> str:
    """``"vllm/utils/__init__.py"`` → ``"vllm.utils"``; ``"vllm/v1/request.py"`` →
    ``"vllm.v1.request"``."""
    parts = member.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sha256_text(text: str) -> str:
    """sha256 of a text's UTF-8 bytes (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Member:
    """One file read from a source.

    Attributes
    ----------
    path
        Its path inside a wheel or checkout (``vllm/v1/core/block_pool.py``).
    text
        Its text.
    where
        Where it was read, for messages and tracebacks (a cached file, or
        ``REPO@COMMIT:PATH``).
    """

    path: str
    text: str
    where: str

    @property
    def module(self) -> str:
        """Its module name."""
        return module_name(self.path)

    @property
    def sha256(self) -> str:
        """sha256 of its text."""
        return sha256_text(self.text)


@dataclass(frozen=True)
class SourceTexts:
    """The members one source string gave: its release (None for a file or branch), and
    the members found, by path (a wanted member the source lacks is absent)."""

    source: str
    vllm_version: str | None
    members: Mapping[str, Member]

    def text(self, path: str) -> str | None:
        """The text of a member, or None when the source lacks it."""
        found = self.members.get(path)
        return None if found is None else found.text


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LoadError(f"{where} is not UTF-8 text") from None


def read_members(source: str, wanted: tuple[str, ...], required: tuple[str, ...]) -> SourceTexts:
    """Read the members ``wanted`` of a source (no ``NAME=``, no swap).

    Parameters
    ----------
    source
        ``vllm==X.Y.Z`` (the release's wheel, through the release cache), ``git:REPO@REF``
        (the members at that commit), a folder (a checkout holding ``vllm/``, or a folder
        holding ``vllm/v1/core/``'s files themselves) or a file of ``vllm/v1/core/`` (its
        folder is read as ``vllm/v1/core/``).
    wanted
        Member paths, in fetch order.
    required
        Those the source must have.

    Returns
    -------
    SourceTexts

    Raises
    ------
    LoadError
        A release, ref or file that cannot be read, a required member missing; one line.
    """
    found: dict[str, Member] = {}
    if source.startswith("vllm=="):
        version = source[len("vllm==") :]
        optional = frozenset(wanted) - frozenset(required)
        try:
            paths = fetch_members(version, wanted, optional)
        except FetchError as exc:
            raise LoadError(str(exc)) from None
        for member, path in paths.items():
            if path is not None:
                found[member] = Member(member, _decode(path.read_bytes(), str(path)), str(path))
        return SourceTexts(source, version, found)
    if source.startswith("git:"):
        try:
            repo, ref, commit = git_commit(source, (required or wanted)[0])
        except SourceError as exc:
            raise LoadError(str(exc)) from None
        for member in wanted:
            raw, reason = git_show(repo, commit, member)
            if raw is None:
                if member in required:
                    raise LoadError(f"cannot read {member} at '{ref}' in {repo}: {reason}")
                continue
            where = f"{Path(repo).resolve()}@{commit}:{member}"
            found[member] = Member(member, _decode(raw, where), where)
        return SourceTexts(source, None, found)
    path = Path(source).expanduser()
    core = "vllm/v1/core/"
    if path.is_dir() and (path / "vllm").is_dir():
        locate: Callable[[str], Path | None] = lambda m: path / m  # noqa: E731
    elif path.is_dir() or path.is_file():
        folder = path if path.is_dir() else path.parent
        locate = lambda m: folder / m[len(core) :] if m.startswith(core) else None  # noqa: E731
    else:
        raise LoadError(
            f"'{source}' is not a file or folder, nor a source (vllm==X.Y.Z, git:REPO@REF)"
        )
    for member in wanted:
        file = locate(member)
        if file is None or not file.is_file():
            if member in required:
                raise LoadError(f"{source}: no {member} there ({file or 'outside ' + core})")
            continue
        found[member] = Member(member, _decode(file.read_bytes(), str(file)), str(file.resolve()))
    return SourceTexts(source, None, found)


# ------------------------------------------------------------------ cutting a module


class _NamesUsed(ast.NodeVisitor):
    """Collect the names a statement uses at run time, annotations left out (they are
    compiled lazily)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)

    def visit_arg(self, node: ast.arg) -> None:
        pass  # the annotation only

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for item in [*node.decorator_list, *node.args.defaults, *node.body]:
            self.visit(item)
        for default in node.args.kw_defaults:
            if default is not None:
                self.visit(default)

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)


def _names_used(node: ast.AST) -> set[str]:
    visitor = _NamesUsed()
    visitor.visit(node)
    return visitor.names


def _defined_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _completed_names(stmt: ast.stmt) -> list[str]:
    """Names a top-level statement completes without defining them: ``X.attr = ...`` or
    ``X[key] = ...`` (``_PyObject_GC_UnTrack.argtypes = [...]`` in ``gc_utils``)."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    if isinstance(stmt, ast.AugAssign | ast.AnnAssign):
        targets = [stmt.target]
    out = []
    for target in targets:
        while isinstance(target, ast.Attribute | ast.Subscript):
            target = target.value
            if isinstance(target, ast.Name):
                out.append(target.id)
    return out


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


@dataclass(frozen=True)
class Cut:
    """What :func:`cut_definitions` chose from a module.

    Attributes
    ----------
    text
        The text to compile: the chosen statements at their own line numbers (with the
        top-level statements that complete a chosen name, ``X.attr = ...``).
    names
        The top-level names defined.
    imports
        The non-standard-library imports the chosen definitions use:
        ``{bound name: (module, attribute or None)}``.
    segments
        Each chosen class's own text and first line, by name (a queue swap binds its
        queue to the release's ``KVCacheBlock``, recorded with its text).
    """

    text: str
    names: tuple[str, ...]
    imports: dict[str, tuple[str, str | None]]
    segments: dict[str, tuple[str, int]]


def _parse(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text, filename=where)
    except SyntaxError as exc:
        raise LoadError(f"syntax error in {where} line {exc.lineno}: {exc.msg}") from None


def cut_definitions(
    text: str, wanted: list[str], where: str, importer: str, tree: ast.Module | None = None
) -> Cut:
    """Cut from a module the definitions ``wanted`` needs, transitively.

    Parameters
    ----------
    text
        The module's text.
    wanted
        Names other modules import from it.
    where
        The file's location, for messages and tracebacks.
    importer
        Who imports them, for the message when one is missing.
    tree
        The text parsed, if it already was.

    Returns
    -------
    Cut

    Raises
    ------
    LoadError
        A syntax error, or a wanted name the file does not define.
    """
    tree = tree if tree is not None else _parse(text, where)
    defs: dict[str, list[ast.stmt]] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    stdlib_imports: list[ast.stmt] = []
    for stmt in tree.body:
        for name in _defined_names(stmt):
            defs.setdefault(name, []).append(stmt)
    for stmt in tree.body:
        # Completions of the module's own definitions only: ``torch.cuda.set_stream = ...``
        # patches an import and is never part of what the subject runs.
        for name in _completed_names(stmt):
            if name in defs and stmt not in defs[name]:
                defs[name].append(stmt)
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            if _is_stdlib(stmt.module):
                stdlib_imports.append(stmt)
            else:
                for alias in stmt.names:
                    imports[alias.asname or alias.name] = (stmt.module, alias.name)
        elif isinstance(stmt, ast.Import):
            if all(_is_stdlib(a.name) for a in stmt.names):
                stdlib_imports.append(stmt)
            else:
                for alias in stmt.names:
                    top = alias.name.split(".")[0]
                    imports[alias.asname or top] = (alias.name if alias.asname else top, None)
    missing = [n for n in wanted if n not in defs and n not in imports]
    if missing:
        raise LoadError(
            f"{where} does not define {', '.join(missing)}, which {importer} imports from it"
        )
    chosen: dict[int, ast.stmt] = {}
    bound: dict[str, tuple[str, str | None]] = {}
    todo, seen = list(wanted), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in defs:
            for stmt in defs[name]:
                if id(stmt) not in chosen:
                    chosen[id(stmt)] = stmt
                    todo.extend(_names_used(stmt))
        elif name in imports:
            bound[name] = imports[name]
    statements = sorted([*stdlib_imports, *chosen.values()], key=lambda s: s.lineno)
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    line = 1
    segments: dict[str, tuple[str, int]] = {}
    for stmt in statements:
        start = min([d.lineno for d in getattr(stmt, "decorator_list", [])] + [stmt.lineno])
        end = stmt.end_lineno or stmt.lineno
        out.append("\n" * (start - line))
        segment = "".join(lines[start - 1 : end])
        out.append(segment if segment.endswith("\n") else segment + "\n")
        line = end + 1
        if isinstance(stmt, ast.ClassDef):
            segments[stmt.name] = (segment, start)
    names = tuple(sorted(n for n in seen if n in defs))
    return Cut("".join(out), names, bound, segments)


# ------------------------------------------------------------------ the graph


def imported_names(tree: ast.Module) -> dict[str, list[str]]:
    """``{module: [names]}`` of every ``from vllm... import`` in a module, functions
    included (a name imported inside a function must be there when it runs)."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        vllm = isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
        if vllm and str(node.module).split(".")[0] == "vllm":
            out.setdefault(str(node.module), []).extend(a.name for a in node.names)
    return out


@dataclass
class Graph:
    """The modules of one subject variant, built on first import.

    Parameters
    ----------
    members
        The release's files, by module name.
    cut
        Module names whose files are cut, not executed whole.
    stand_ins
        Stand-in modules by name (:func:`kvqueue.sources.stand_ins.stub_table`).
    overrides
        ``{module: {name: value}}`` set in a module once it is built, before anything
        imports from it (a swapped queue class in ``kv_cache_utils``).
    after_cut
        Called with a cut module's name, module and :class:`Cut` right after it is built
        and before the overrides (a queue swap binds its queue to the release's block).
    harness
        ``{module: names}`` the measuring code itself reads from a cut module when the
        release defines them (``get_request_block_hasher``, from 0.10.1 on).
    """

    members: dict[str, Member]
    cut: frozenset[str]
    stand_ins: dict[str, types.ModuleType]
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    after_cut: Callable[[str, types.ModuleType, Cut], None] | None = None
    harness: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    built: dict[str, types.ModuleType] = field(default_factory=dict)
    cuts: dict[str, Cut] = field(default_factory=dict)
    stubbed: set[str] = field(default_factory=set)
    _wanted: dict[str, set[str]] = field(default_factory=dict)
    _importers: dict[str, set[str]] = field(default_factory=dict)
    _tag: str = ""

    def __post_init__(self) -> None:
        global _counter
        _counter += 1
        self._tag = f"kvqueue._graphs.g{_counter}"
        trees = {m: _parse(member.text, member.where) for m, member in self.members.items()}
        for name, tree in trees.items():
            if name in self.cut:
                continue
            for module, names in imported_names(tree).items():
                self._wanted.setdefault(module, set()).update(names)
                self._importers.setdefault(module, set()).add(self.members[name].path)
        for module, names in self.harness.items():
            if module in trees:
                defined = {n for stmt in trees[module].body for n in _defined_names(stmt)}
                self._wanted.setdefault(module, set()).update(n for n in names if n in defined)
        # The cut modules' chosen definitions import from each other: to a fixed point.
        changed = True
        while changed:
            changed = False
            for name in sorted(self.cut & set(self.members)):
                member = self.members[name]
                wanted = sorted(self._wanted.get(name, ()))
                importers = sorted(p.rsplit("/", 1)[-1] for p in self._importers.get(name, ()))
                who = " or ".join(importers) or "the loaded code"
                cut = cut_definitions(member.text, wanted, member.where, who, trees[name])
                self.cuts[name] = cut
                for module, attr in cut.imports.values():
                    if attr is not None and module in self.cut:
                        target = self._wanted.setdefault(module, set())
                        if attr not in target:
                            target.add(attr)
                            changed = True

    # -------------------------------------------------------------- building

    def module(self, name: str) -> types.ModuleType:
        """The module ``name`` (built on first use: stand-in, release file or stub)."""
        found = self.built.get(name)
        if found is not None:
            return found
        if name in self.members and name in self.cut:
            module = self._build_cut(name)
        elif name in self.members:
            module = self._build_whole(name)
        elif name in self.stand_ins:
            module = self.stand_ins[name]
        elif any(m.startswith(name + ".") for m in [*self.members, *self.stand_ins]):
            module = types.ModuleType(name)  # a package: its submodules only
        else:
            module = stand_ins.StubModule(name)
            self.stubbed.add(name)
        self.built[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(self.module(parent), child, module)
        return module

    def _fresh(self, name: str, where: str) -> types.ModuleType:
        qualified = f"{self._tag}.{name}"
        module = types.ModuleType(qualified)
        module.__file__ = where
        module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": self._import}
        # dataclasses and tracebacks look modules up in sys.modules.
        sys.modules[qualified] = module
        self.built[name] = module
        return module

    def _build_whole(self, name: str) -> types.ModuleType:
        member = self.members[name]
        module = self._fresh(name, member.where)
        if member.path.endswith("__init__.py"):
            module.__path__ = []  # type: ignore[attr-defined]
        # Byte for byte, with the release's own compiler flags: none inherited from here.
        code = compile(member.text, member.where, "exec", dont_inherit=True)
        self._run(code, module, member.where, member.where)
        self._override(name, module)
        return module

    def _build_cut(self, name: str) -> types.ModuleType:
        member = self.members[name]
        cut = self.cuts[name]
        module = self._fresh(name, member.where)
        for bound, (target, attr) in cut.imports.items():
            module.__dict__[bound] = self._value(target, attr)
        code = compile(cut.text, member.where, "exec", flags=_LAZY_ANNOTATIONS, dont_inherit=True)
        names = ", ".join(sorted(self._wanted.get(name, ()))) or "none"
        self._run(code, module, f"{member.where} (definitions {names})", member.where)
        if self.after_cut is not None:
            self.after_cut(name, module, cut)
        self._override(name, module)
        return module

    def _override(self, name: str, module: types.ModuleType) -> None:
        for attr, value in self.overrides.get(name, {}).items():
            module.__dict__[attr] = value

    def _value(self, module: str, attr: str | None) -> Any:
        """``module.attr`` for a cut module's import (a stub when nothing defines it)."""
        if module.split(".")[0] != "vllm" and not _is_stdlib(module):
            self.stubbed.add(module)
            target: Any = stand_ins.StubModule(module)
        else:
            target = self.module(module)
        if attr is None:
            return target
        try:
            return getattr(target, attr)
        except (AttributeError, stand_ins.StandInUnavailable):
            return stand_ins.NotStoodIn(f"{module}.{attr}")

    def _run(self, code: types.CodeType, module: types.ModuleType, what: str, path: str) -> None:
        """Execute ``code`` in ``module``; a failure is one line naming the line and error."""
        try:
            exec(code, module.__dict__)
        except LoadError:
            raise
        except Exception as exc:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
            at = f" line {frames[-1].lineno}" if frames else ""
            message = str(exc).splitlines()[0] if str(exc) else ""
            raise LoadError(f"{what}{at}: {type(exc).__name__}: {message}") from None

    def _import(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        """The ``__import__`` of every loaded module: ``vllm.*`` and third-party packages
        from the graph, the standard library as usual."""
        if level != 0:
            raise ImportError(f"relative import of '{name}' (level {level}) has no stand-in")
        top = name.split(".")[0]
        if top == "vllm":
            module = self.module(name)
            for wanted in fromlist or ():
                try:
                    getattr(module, wanted)
                except AttributeError:
                    sub = f"{name}.{wanted}"
                    if sub in self.members or sub in self.stand_ins:
                        self.module(sub)
                    else:
                        raise ImportError(f"{sub} is defined nowhere here") from None
            return module if fromlist else self.module("vllm")
        if top not in sys.stdlib_module_names:
            # torch, numpy, msgspec...: named by the code, never used by the paths run here.
            key = name if fromlist else top
            module = self.built.get(key) or self.stand_ins.get(key)
            if module is None:
                module = self.built[key] = stand_ins.StubModule(key)
                self.stubbed.add(key)
            return module
        return builtins.__import__(name, globals, locals, fromlist or (), level)

    def provenance(self) -> dict[str, Any]:
        """What was loaded how: whole files, cut names, stubbed modules, stand-ins used."""
        whole = sorted(n for n in self.built if n in self.members and n not in self.cut)
        return {
            "whole": [self.members[n].path for n in whole],
            "cut": {self.members[n].path: list(self.cuts[n].names) for n in sorted(self.cuts)},
            "stubbed": sorted(self.stubbed),
            "stood_in": sorted(
                n for n in self.built if n in self.stand_ins and n not in self.members
            ),
            "member_sha256": {m.path: m.sha256 for m in self.members.values()},
        }

    def code_sha256(self) -> str:
        """sha256 of the code the variant runs of its release: each whole file as
        executed and each cut as compiled (releases that differ only elsewhere in a cut
        module run the same code)."""
        parts = []
        for name in sorted(self.built):
            if name in self.cuts:
                parts.append(f"{name}\0{self.cuts[name].text}")
            elif name in self.members:
                parts.append(f"{name}\0{self.members[name].text}")
        return sha256_text("\0\0".join(parts))


UTILS_MODULE = "vllm.v1.core.kv_cache_utils"
UTILS_MEMBER = "vllm/v1/core/kv_cache_utils.py"


def stack_sha256(member_sha256: Mapping[str, str | None], queue: Variant | None) -> str:
    """One digest of everything a stack variant runs: each member's sha256 (None: absent)
    and a swapped queue class's (what its gate checked and the workers compare)."""
    parts = {
        **{k: v or "" for k, v in member_sha256.items()},
        "queue": "" if queue is None else queue.queue_src.sha256,
    }
    return sha256_text(json.dumps(parts, sort_keys=True))


def queue_swap(
    queue_source: str,
    base: str,
    texts: SourceTexts,
    holder: dict[str, Variant],
    calls: tuple[str, ...] = (),
) -> Callable[[str, types.ModuleType, Cut], None]:
    """A :class:`Graph` ``after_cut`` hook that swaps a queue into ``kv_cache_utils``.

    The queue class of ``queue_source`` (any queue source) is bound to the release's own
    ``KVCacheBlock`` (recorded with its text) and replaces ``FreeKVCacheBlockQueue``
    before anything imports it, so the pool links, pops and removes through it; the
    loaded queue is kept in ``holder["queue"]``.

    Raises (when the hook runs)
    ---------------------------
    LoadError
        The queue cannot be loaded, or lacks one of ``calls`` (the methods the pool calls
        on its queue).
    """

    def swap(name: str, utils: types.ModuleType, cut: Cut) -> None:
        if name != UTILS_MODULE:
            return
        text, line = cut.segments.get(BLOCK_CLASS, ("", 0))
        member = texts.members.get(UTILS_MEMBER)
        block_src = ClassSource(
            source=base,
            path=member.where if member else base,
            class_name=BLOCK_CLASS,
            text=text,
            vllm_version=texts.vllm_version,
            file_sha256=member.sha256 if member else "",
            first_line=line,
        )
        try:
            queue = load_variant(queue_source, (utils.__dict__[BLOCK_CLASS], block_src))
        except SourceError as exc:
            raise LoadError(f"queue {queue_source}: {exc}") from None
        lacking = [m for m in calls if not callable(getattr(queue.queue_cls, m, None))]
        if lacking:
            raise LoadError(
                f"queue {queue_source} lacks {', '.join(lacking)}, which the pool of {base} calls"
            )
        utils.__dict__[QUEUE_CLASS] = queue.queue_cls
        holder["queue"] = queue

    return swap
