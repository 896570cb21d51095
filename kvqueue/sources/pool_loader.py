"""Turn a *pool source string* into vLLM's ``BlockPool`` class, without torch.

Pool sources (docs/appendix-pool.md):

=================================  =====================================================
``vllm==0.33.0``                   that release's ``vllm/v1/core/block_pool.py`` (0.10.0 on)
``git:REPO@REF``                   ``block_pool.py`` and ``kv_cache_utils.py`` at REF
``path/to/block_pool.py``          a file, with ``kv_cache_utils.py`` beside it
``POOL+queue=QUEUE``               the pool of POOL running the queue class of QUEUE (any
                                   queue source: ``kvqueue``, ``vllm==0.31.0``, a branch)
=================================  =====================================================

Any source may start with ``NAME=`` (the label). ``kv_cache_metrics.py`` is read beside
the pool when the release has it (0.18.0 on).

``block_pool.py`` is compiled byte for byte (``dont_inherit=True``: this module's
``from __future__ import annotations`` must not leak into vLLM's code, whose annotations
are evaluated at definition time) into a fresh module whose ``vllm.*`` imports are
answered from a private table (:mod:`kvqueue.sources.stand_ins`), never from
``sys.modules``. ``vllm.v1.core.kv_cache_utils`` in that table is the release's own file,
cut by ``ast``: the names ``block_pool.py`` imports from it (``KVCacheBlock``,
``FreeKVCacheBlockQueue``, the ``BlockHash`` types and helpers) and every top-level
definition they use, with the file's standard-library imports; a vLLM name one of them
imports is a stand-in or, if used only inside a function, a placeholder that raises when
used. Those extracts are compiled with lazy annotations: their annotations name vLLM types
(``VllmConfig``, ``KVCacheSpec``) that the pool never uses and nothing stands in for.
``kv_cache_metrics.py`` (standard library only) is executed byte for byte.

A queue swap binds the other queue class to the release's own ``KVCacheBlock``
(:func:`kvqueue.sources.loader.load_variant`) and puts it into the table as
``FreeKVCacheBlockQueue``, so the pool links, pops and removes through it; a queue that
lacks a method the pool calls is refused.

A source that cannot be loaded raises :class:`PoolSourceError`, one line naming the
import, definition or method that failed.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations
import __future__

import ast
import hashlib
import json
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvqueue.schema import split_name
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
from kvqueue.sources.release_cache import MEMBER, METRICS_MEMBER, POOL_MEMBER, POOL_MEMBERS
from kvqueue.sources.release_fetch import fetch_members
from kvqueue.sources.versions import is_version, version_key

POOL_CLASS = "BlockPool"
#: The first release whose pool this loader takes (the issue's scope: 0.10.0 on).
FIRST_POOL_RELEASE = "0.10.0"
#: Separator of a queue swap: ``vllm==0.33.0+queue=kvqueue``.
QUEUE_SEPARATOR = "+queue="
UTILS_MODULE = "vllm.v1.core.kv_cache_utils"
METRICS_MODULE = "vllm.v1.core.kv_cache_metrics"
_LAZY_ANNOTATIONS = __future__.annotations.compiler_flag


class PoolSourceError(ValueError):
    """A pool source cannot be loaded; the message is one line naming what failed."""


@dataclass(frozen=True)
class PoolTexts:
    """The texts of one pool source, where they came from and their sha256s."""

    source: str
    vllm_version: str | None
    pool_text: str
    pool_path: str
    utils_text: str
    utils_path: str
    metrics_text: str | None = None
    metrics_path: str | None = None

    def sha256s(self) -> dict[str, str | None]:
        """sha256 of each member's bytes, by member path (None: absent)."""
        return {
            POOL_MEMBER: _sha(self.pool_text),
            MEMBER: _sha(self.utils_text),
            METRICS_MEMBER: None if self.metrics_text is None else _sha(self.metrics_text),
        }


@dataclass(frozen=True)
class PoolVariant:
    """One ``BlockPool`` class under test, loaded with its own queue or a swapped one.

    Attributes
    ----------
    label, source
        The label shown in tables and the pool source string (queue swap included).
    pool_cls
        The ``BlockPool`` class.
    utils
        The module answering ``vllm.v1.core.kv_cache_utils`` (the release's own
        definitions; its ``FreeKVCacheBlockQueue`` is the swapped queue, if any).
    block_cls, queue_cls
        The ``KVCacheBlock`` and ``FreeKVCacheBlockQueue`` the pool uses.
    texts
        The member texts and where they came from.
    queue
        The swapped-in queue (a :class:`kvqueue.sources.loader.Variant`), or None.
    utils_names
        The top-level definitions cut from ``kv_cache_utils.py``.
    placeholders
        vLLM names those definitions import that nothing stands in for (they raise if
        used).
    queue_calls
        The methods the pool calls on ``self.free_block_queue``.
    code_sha256
        sha256 of the code the pool runs of its release: ``block_pool.py``, the
        definitions cut from ``kv_cache_utils.py`` and ``kv_cache_metrics.py`` (a release
        history's version key: releases that differ only elsewhere in
        ``kv_cache_utils.py`` run the same pool).
    """

    label: str
    source: str
    pool_cls: type
    utils: types.ModuleType
    block_cls: type
    queue_cls: type
    texts: PoolTexts
    queue: Variant | None = None
    utils_names: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()
    queue_calls: tuple[str, ...] = field(default=())
    code_sha256: str = ""

    @property
    def sha256(self) -> str:
        """One digest of everything the pool runs: each member's sha256 and the swapped
        queue class's (what the gate checked and the workers compare before timing)."""
        parts = {
            **{k: v or "" for k, v in self.texts.sha256s().items()},
            "queue": "" if self.queue is None else self.queue.queue_src.sha256,
        }
        return _sha(json.dumps(parts, sort_keys=True))

    def provenance(self) -> dict[str, Any]:
        """Return a JSON-ready record of where this pool's code came from."""
        return {
            "label": self.label,
            "source": self.source,
            "vllm_version": self.texts.vllm_version,
            "pool_path": self.texts.pool_path,
            "utils_path": self.texts.utils_path,
            "metrics_path": self.texts.metrics_path,
            "member_sha256": self.texts.sha256s(),
            "sha256": self.sha256,
            # The fields every variant's record has, as the report reads them: the class
            # is the pool (its digest covers every member and a swapped queue); the file
            # is the release's kv_cache_utils.py, which a queue run of the same release
            # records too, so one release check covers both subjects.
            "class_name": POOL_CLASS,
            "class_sha256": self.sha256,
            "file_sha256": _sha(self.texts.utils_text),
            "queue_source": None if self.queue is None else self.queue.source,
            "queue_class_sha256": None if self.queue is None else self.queue.queue_src.sha256,
            "utils_names": list(self.utils_names),
            "placeholders": list(self.placeholders),
            "queue_calls": list(self.queue_calls),
        }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_queue(source: str) -> tuple[str, str | None]:
    """Split ``"POOL+queue=QUEUE"`` into ``("POOL", "QUEUE")`` (``None``: its own queue)."""
    pool, sep, queue = source.partition(QUEUE_SEPARATOR)
    if not sep:
        return source, None
    if not pool or not queue:
        raise PoolSourceError(f"'{source}' is not of the form POOL{QUEUE_SEPARATOR}QUEUE")
    return pool, queue


def read_pool_texts(source: str) -> PoolTexts:
    """Read ``block_pool.py``, ``kv_cache_utils.py`` and ``kv_cache_metrics.py`` of a pool
    source (no ``NAME=``, no queue swap).

    Raises
    ------
    PoolSourceError
        A release before :data:`FIRST_POOL_RELEASE`, a release or ref that cannot be
        read, a file without ``kv_cache_utils.py`` beside it; one line.
    """
    if source.startswith("vllm=="):
        version = source[len("vllm==") :]
        if is_version(version) and version_key(version) < version_key(FIRST_POOL_RELEASE):
            raise PoolSourceError(
                f"{source}: pool subjects start at vLLM {FIRST_POOL_RELEASE} (older pools "
                "drive the queue by popleft loops through an API this loader does not adapt)"
            )
        try:
            paths = fetch_members(version, POOL_MEMBERS)
        except FetchError as exc:
            raise PoolSourceError(str(exc)) from None
        pool_path, utils_path = paths[POOL_MEMBER], paths[MEMBER]
        assert pool_path is not None and utils_path is not None  # required members
        metrics = paths[METRICS_MEMBER]
        return PoolTexts(
            source=source,
            vllm_version=version,
            pool_text=_decode(pool_path.read_bytes(), str(pool_path)),
            pool_path=str(pool_path),
            utils_text=_decode(utils_path.read_bytes(), str(utils_path)),
            utils_path=str(utils_path),
            metrics_text=None if metrics is None else _decode(metrics.read_bytes(), str(metrics)),
            metrics_path=None if metrics is None else str(metrics),
        )
    if source.startswith("git:"):
        return _read_git_pool(source)
    if source in ("kvqueue", "kvqueue:floor"):
        raise PoolSourceError(
            f"'{source}' is a queue, not a pool: use a release's pool with it, "
            f"e.g. vllm==0.33.0{QUEUE_SEPARATOR}{source}"
        )
    path = Path(source).expanduser()
    if not path.is_file():
        raise PoolSourceError(
            f"'{source}' is not a file, nor a pool source (vllm==X.Y.Z from "
            f"{FIRST_POOL_RELEASE}, git:REPO@REF, path/to/block_pool.py)"
        )
    utils = path.with_name("kv_cache_utils.py")
    if not utils.is_file():
        raise PoolSourceError(f"{path}: no kv_cache_utils.py beside it")
    metrics = path.with_name("kv_cache_metrics.py")
    return PoolTexts(
        source=source,
        vllm_version=None,
        pool_text=_decode(path.read_bytes(), str(path)),
        pool_path=str(path.resolve()),
        utils_text=_decode(utils.read_bytes(), str(utils)),
        utils_path=str(utils.resolve()),
        metrics_text=_decode(metrics.read_bytes(), str(metrics)) if metrics.is_file() else None,
        metrics_path=str(metrics.resolve()) if metrics.is_file() else None,
    )


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PoolSourceError(f"{where} is not UTF-8 text") from None


def _read_git_pool(source: str) -> PoolTexts:
    """Read the three members at REF from ``git:REPO@REF`` (the metrics may be absent)."""
    try:
        repo, ref, commit = git_commit(source, POOL_MEMBER)
    except SourceError as exc:
        raise PoolSourceError(str(exc)) from None
    texts: dict[str, tuple[str, str] | None] = {}
    for member in POOL_MEMBERS:
        raw, reason = git_show(repo, commit, member)
        where = f"{Path(repo).resolve()}@{commit}:{member}"
        if raw is None:
            if member == METRICS_MEMBER:
                texts[member] = None
                continue
            raise PoolSourceError(f"cannot read {member} at '{ref}' in {repo}: {reason}")
        texts[member] = (_decode(raw, where), where)
    pool, utils, metrics = texts[POOL_MEMBER], texts[MEMBER], texts[METRICS_MEMBER]
    assert pool is not None and utils is not None
    return PoolTexts(
        source=source,
        vllm_version=None,
        pool_text=pool[0],
        pool_path=pool[1],
        utils_text=utils[0],
        utils_path=utils[1],
        metrics_text=None if metrics is None else metrics[0],
        metrics_path=None if metrics is None else metrics[1],
    )


# ------------------------------------------------------------ cutting kv_cache_utils.py


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


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


@dataclass(frozen=True)
class _Cut:
    text: str
    names: tuple[str, ...]
    vllm_imports: dict[str, tuple[str, str | None]]
    block_text: str
    block_line: int


def cut_utils(utils_text: str, wanted: list[str], where: str) -> _Cut:
    """Cut from ``kv_cache_utils.py`` the definitions ``wanted`` needs, transitively.

    Parameters
    ----------
    utils_text
        The file's text.
    wanted
        Names ``block_pool.py`` imports from it.
    where
        The file's location, for messages and tracebacks.

    Returns
    -------
    _Cut
        The text to compile (the chosen statements at their own line numbers, blank
        lines between), the names defined, the vLLM (or third-party) imports to bind:
        ``{name: (module, attribute or None)}``, and ``KVCacheBlock``'s own text.

    Raises
    ------
    PoolSourceError
        A syntax error, or a wanted name the file does not define.
    """
    try:
        tree = ast.parse(utils_text, filename=where)
    except SyntaxError as exc:
        raise PoolSourceError(f"syntax error in {where} line {exc.lineno}: {exc.msg}") from None
    defs: dict[str, list[ast.stmt]] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    stdlib_imports: list[ast.stmt] = []
    for stmt in tree.body:
        for name in _defined_names(stmt):
            defs.setdefault(name, []).append(stmt)
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
                    if alias.asname:
                        imports[alias.asname] = (alias.name, None)
                    else:
                        imports[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
    missing = [n for n in wanted if n not in defs and n not in imports]
    if missing:
        raise PoolSourceError(
            f"{where} does not define {', '.join(missing)}, which block_pool.py imports from it"
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
    lines = utils_text.splitlines(keepends=True)
    out: list[str] = []
    line = 1
    block_text, block_line = "", 0
    for stmt in statements:
        start = min([d.lineno for d in getattr(stmt, "decorator_list", [])] + [stmt.lineno])
        end = stmt.end_lineno or stmt.lineno
        out.append("\n" * (start - line))
        segment = "".join(lines[start - 1 : end])
        out.append(segment if segment.endswith("\n") else segment + "\n")
        line = end + 1
        if isinstance(stmt, ast.ClassDef) and stmt.name == BLOCK_CLASS:
            block_text, block_line = segment, start
    names = tuple(sorted(n for n in seen if n in defs))
    return _Cut("".join(out), names, bound, block_text, block_line)


# -------------------------------------------------------------------------- loading

_counter = 0


def _module(name: str, path: str, table: dict[str, types.ModuleType]) -> types.ModuleType:
    """A fresh module registered in ``sys.modules`` (dataclasses and tracebacks look
    there), whose imports are answered by :func:`stand_ins.importer`."""
    global _counter
    _counter += 1
    qualified = f"kvqueue._pools.p{_counter}.{name}"
    module = types.ModuleType(qualified)
    module.__file__ = path
    module.__dict__["__builtins__"] = stand_ins.builtins_with(stand_ins.importer(table))
    sys.modules[qualified] = module
    return module


def _run(code: types.CodeType, module: types.ModuleType, what: str, path: str) -> None:
    """Execute ``code`` in ``module``; any failure is one line naming the line and error."""
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        at = f" line {frames[-1].lineno}" if frames else ""
        message = str(exc).splitlines()[0] if str(exc) else ""
        raise PoolSourceError(f"{what}{at}: {type(exc).__name__}: {message}") from None


def _pool_imports(tree: ast.Module, module: str) -> list[str]:
    """Names ``block_pool.py`` imports (at top level) from ``module``."""
    return [
        alias.name
        for stmt in tree.body
        if isinstance(stmt, ast.ImportFrom) and stmt.module == module
        for alias in stmt.names
    ]


def queue_calls(tree: ast.Module) -> tuple[str, ...]:
    """Methods the pool calls on ``self.free_block_queue``, sorted."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "free_block_queue"
        ):
            found.add(node.func.attr)
    return tuple(sorted(found))


def load_pool(source: str, label: str | None = None) -> PoolVariant:
    """Load the ``BlockPool`` class of a pool source.

    Parameters
    ----------
    source
        A pool source string (module docstring), ``NAME=`` and ``+queue=`` included.
    label
        The label; defaults to the source's ``NAME=`` or the source string.

    Returns
    -------
    PoolVariant

    Raises
    ------
    PoolSourceError
        One line naming the import, definition or method that failed.
    """
    name, spec = split_name(source)
    pool_source, queue_source = split_queue(spec)
    texts = read_pool_texts(pool_source)
    what = texts.pool_path
    try:
        tree = ast.parse(texts.pool_text, filename=texts.pool_path)
    except SyntaxError as exc:
        raise PoolSourceError(f"syntax error in {what} line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(s, ast.ClassDef) and s.name == POOL_CLASS for s in tree.body):
        raise PoolSourceError(f"class {POOL_CLASS} not found in {what}")
    table = stand_ins.stub_table()
    wanted = _pool_imports(tree, UTILS_MODULE)
    cut = cut_utils(texts.utils_text, [*wanted, BLOCK_CLASS], texts.utils_path)
    utils = _module("kv_cache_utils", texts.utils_path, table)
    placeholders = []
    for bound, (module, attr) in cut.vllm_imports.items():
        if attr is None:
            value = table.get(module) or stand_ins.NotStoodIn(module)
        else:
            value = stand_ins.lookup(table, module, attr)
        if isinstance(value, stand_ins.NotStoodIn):
            placeholders.append(f"{module}.{attr}" if attr else module)
        utils.__dict__[bound] = value
    code = compile(cut.text, texts.utils_path, "exec", flags=_LAZY_ANNOTATIONS, dont_inherit=True)
    _run(code, utils, f"{texts.utils_path} (definitions {', '.join(wanted)})", texts.utils_path)
    table[UTILS_MODULE] = utils
    if texts.metrics_text is not None and texts.metrics_path is not None:
        metrics = _module("kv_cache_metrics", texts.metrics_path, table)
        code = compile(texts.metrics_text, texts.metrics_path, "exec", dont_inherit=True)
        _run(code, metrics, texts.metrics_path, texts.metrics_path)
        table[METRICS_MODULE] = metrics
    elif _pool_imports(tree, METRICS_MODULE):
        raise PoolSourceError(f"{what} imports {METRICS_MODULE}, but the source has no such file")
    stand_ins.link_packages(table)
    calls = queue_calls(tree)
    queue: Variant | None = None
    if queue_source is not None:
        block_src = ClassSource(
            source=pool_source,
            path=texts.utils_path,
            class_name=BLOCK_CLASS,
            text=cut.block_text,
            vllm_version=texts.vllm_version,
            file_sha256=_sha(texts.utils_text),
            first_line=cut.block_line,
        )
        try:
            queue = load_variant(queue_source, (utils.__dict__[BLOCK_CLASS], block_src))
        except SourceError as exc:
            raise PoolSourceError(f"queue {queue_source}: {exc}") from None
        lacking = [m for m in calls if not callable(getattr(queue.queue_cls, m, None))]
        if lacking:
            raise PoolSourceError(
                f"queue {queue_source} lacks {', '.join(lacking)}, which {POOL_CLASS} of "
                f"{pool_source} calls"
            )
        utils.__dict__[QUEUE_CLASS] = queue.queue_cls
    pool_module = _module("block_pool", texts.pool_path, table)
    # Byte for byte, with the release's own compiler flags: none inherited from here.
    code = compile(texts.pool_text, texts.pool_path, "exec", dont_inherit=True)
    _run(code, pool_module, what, texts.pool_path)
    return PoolVariant(
        label=label or name or spec,
        source=spec,
        pool_cls=pool_module.__dict__[POOL_CLASS],
        utils=utils,
        block_cls=utils.__dict__[BLOCK_CLASS],
        queue_cls=utils.__dict__[QUEUE_CLASS],
        texts=texts,
        queue=queue,
        utils_names=cut.names,
        placeholders=tuple(sorted(placeholders)),
        queue_calls=calls,
        code_sha256=_sha(f"{texts.pool_text}\0{cut.text}\0{texts.metrics_text or ''}"),
    )
