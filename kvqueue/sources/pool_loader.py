"""Turn a *pool source string* into vLLM's ``BlockPool`` class, without torch.

Pool sources (docs/appendix-pool.md):

=================================  =====================================================
``vllm==0.33.0``                   that release's ``vllm/v1/core/block_pool.py`` (0.9.1 on)
``git:REPO@REF``                   ``block_pool.py`` and ``kv_cache_utils.py`` at REF
``path/to/block_pool.py``          a file, with ``kv_cache_utils.py`` beside it
``POOL+queue=QUEUE``               the pool of POOL running the queue class of QUEUE (any
                                   queue source: ``kvqueue``, ``vllm==0.31.0``, a branch)
=================================  =====================================================

Any source may start with ``NAME=`` (the label). ``kv_cache_metrics.py`` is read beside
the pool when the release has it (0.18.0 on).

The pool is :mod:`kvqueue.sources.module_graph` rooted at ``block_pool.py``, the loader
every subject uses: ``block_pool.py`` and ``kv_cache_metrics.py`` are executed byte for
byte; ``kv_cache_utils.py`` is cut to the names the pool imports (``KVCacheBlock``,
``FreeKVCacheBlockQueue``, the ``BlockHash`` types and helpers) and every top-level
definition they use, as are the helpers a release or branch has beside it
(``vllm/utils``'s ``sha256`` for 0.9.x, ``gc_utils`` from 0.34.0, the eviction event of
``v1/metrics/stats.py``). Every other vLLM name is a stand-in or a placeholder that
refuses the variant when reached (:mod:`kvqueue.sources.stand_ins`).

A queue swap binds the other queue class to the release's own ``KVCacheBlock``
(:func:`kvqueue.sources.module_graph.queue_swap`) and puts it into ``kv_cache_utils`` as
``FreeKVCacheBlockQueue``, so the pool links, pops and removes through it; a queue that
lacks a method the pool calls is refused.

A source that cannot be loaded raises :class:`PoolSourceError`, one line naming the
import, definition or method that failed.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations

import ast
import hashlib
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
    SourceError,
    Variant,
    git_commit,
    git_show,
)
from kvqueue.sources.module_graph import (
    UTILS_MODULE,
    Graph,
    LoadError,
    Member,
    SourceTexts,
    queue_swap,
    read_members,
    stack_sha256,
)
from kvqueue.sources.release_cache import MEMBER, METRICS_MEMBER, POOL_MEMBER, POOL_MEMBERS
from kvqueue.sources.release_fetch import fetch_members
from kvqueue.sources.versions import below_floor

POOL_CLASS = "BlockPool"
#: The first release whose pool this loader takes, found by running each: 0.9.0's pool
#: keys its cache by ``BlockHashType`` without group ids and its blocks have no
#: ``is_null``, an API the pool adapter and gate do not drive (its manager stack runs:
#: the manager subject's floor is 0.9.0).
FIRST_POOL_RELEASE = "0.9.1"
#: Separator of a queue swap: ``vllm==0.33.0+queue=kvqueue``.
QUEUE_SEPARATOR = "+queue="
POOL_MODULE = "vllm.v1.core.block_pool"
METRICS_MODULE = "vllm.v1.core.kv_cache_metrics"
#: Cut to the definitions the pool imports (the rest imports most of vLLM).
CUT = frozenset({UTILS_MODULE, "vllm.utils", "vllm.utils.gc_utils", "vllm.v1.metrics.stats"})
#: Helpers read beside the pool's members from a release or branch (any may be absent).
HELPER_MEMBERS = (
    "vllm/utils.py",
    "vllm/utils/__init__.py",
    "vllm/utils/hashing.py",
    "vllm/utils/gc_utils.py",
    "vllm/v1/metrics/stats.py",
)


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
    graph: Graph | None = None

    @property
    def sha256(self) -> str:
        """One digest of everything the pool runs: each member's sha256 and the swapped
        queue class's (what the gate checked and the workers compare before timing)."""
        return stack_sha256(self.texts.sha256s(), self.queue)

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
    if below_floor(source, FIRST_POOL_RELEASE):
        raise PoolSourceError(
            f"{source}: pool subjects start at vLLM {FIRST_POOL_RELEASE} (0.9.0's pool keys "
            "its cache by BlockHashType without group ids, an API the pool adapter does not call)"
        )
    if source.startswith("vllm=="):
        version = source[len("vllm==") :]
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


# -------------------------------------------------------------------------- loading


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
    if _pool_imports(tree, METRICS_MODULE) and texts.metrics_text is None:
        raise PoolSourceError(f"{what} imports {METRICS_MODULE}, but the source has no such file")
    calls = queue_calls(tree)
    members = {
        m.module: m for m in _helpers(pool_source).members.values() if m.path not in POOL_MEMBERS
    }
    for path, text, where in (
        (POOL_MEMBER, texts.pool_text, texts.pool_path),
        (MEMBER, texts.utils_text, texts.utils_path),
        (METRICS_MEMBER, texts.metrics_text, texts.metrics_path),
    ):
        if text is not None and where is not None:
            member = Member(path, text, where)
            members[member.module] = member
    holder: dict[str, Variant] = {}
    by_path = {m.path: m for m in members.values()}
    source_texts = SourceTexts(pool_source, texts.vllm_version, by_path)
    after_cut = (
        None
        if queue_source is None
        else queue_swap(queue_source, pool_source, source_texts, holder, calls)
    )
    try:
        graph = Graph(
            members,
            CUT,
            stand_ins.stub_table(),
            after_cut=after_cut,
            harness={UTILS_MODULE: (BLOCK_CLASS, QUEUE_CLASS)},
        )
        pool_module = graph.module(POOL_MODULE)
    except LoadError as exc:
        raise PoolSourceError(str(exc)) from None
    utils = graph.module(UTILS_MODULE)
    placeholders = sorted(
        f"{module}.{attr}" if attr else module
        for bound, (module, attr) in graph.cuts[UTILS_MODULE].imports.items()
        if isinstance(utils.__dict__.get(bound), stand_ins.NotStoodIn | stand_ins.StubModule)
    )
    queue = holder.get("queue")
    return PoolVariant(
        label=label or name or spec,
        source=spec,
        pool_cls=pool_module.__dict__[POOL_CLASS],
        utils=utils,
        block_cls=utils.__dict__[BLOCK_CLASS],
        queue_cls=utils.__dict__[QUEUE_CLASS],
        texts=texts,
        queue=queue,
        utils_names=graph.cuts[UTILS_MODULE].names,
        placeholders=tuple(placeholders),
        queue_calls=calls,
        code_sha256=graph.code_sha256(),
        graph=graph,
    )


def _helpers(source: str) -> SourceTexts:
    """The standard-library helpers a pool imports beside its three members (``gc_utils``
    from 0.34.0, ``vllm/utils``'s ``sha256`` in 0.9.x, ``stats``' eviction event), read
    from a release or branch; a file source has none (its pool runs their stand-ins)."""
    if not (source.startswith("vllm==") or source.startswith("git:")):
        return SourceTexts(source, None, {})
    try:
        return read_members(source, HELPER_MEMBERS, ())
    except LoadError as exc:
        raise PoolSourceError(str(exc)) from None
