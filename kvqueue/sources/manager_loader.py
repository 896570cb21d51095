"""Turn a *manager source string* into vLLM's ``KVCacheManager`` stack, without torch.

Manager sources (docs/appendix-manager.md):

=====================================  ===================================================
``vllm==0.34.0``                       that release's manager stack (:data:`FIRST_RELEASE` on)
``git:REPO@REF``                       the same files at REF of a vLLM checkout
``path/to/checkout``                   a folder holding ``vllm/`` (or ``vllm/v1/core/``'s
                                       files themselves)
``SRC+queue=QUEUE``                    the manager of SRC running the queue class of QUEUE
                                       (any queue source: ``kvqueue``, ``vllm==0.10.0``)
``SRC+pool=POOL``                      the manager of SRC running ``block_pool.py`` of POOL
                                       (any source above: a release, a branch, a folder)
=====================================  ===================================================

Any source may start with ``NAME=`` (the label), and both swaps may be given. A swap
attributes a saving to the part that changed: the rest of the stack stays SRC's.

The stack is :mod:`kvqueue.sources.module_graph` rooted at
``vllm/v1/core/kv_cache_manager.py``: the coordinator, the single-type managers, the
``BlockPool``, ``kv_cache_metrics.py``, ``kv_cache_interface.py``, the release's own
``Request`` and the standard-library helpers (``math_utils``, ``hashing``,
``kv_cache_spec_registry``, ``kv_cache_layout``, ``token_buffer``) are executed whole;
``kv_cache_utils.py``, ``vllm/utils``, ``vllm/v1/utils.py``, ``vllm/v1/metrics/stats.py``
and ``vllm/utils/gc_utils.py`` are cut to the definitions the stack imports (hot helpers
such as ``cdiv``, ``ConstantList`` and ``sha256`` stay the release's own code). Every other
name is a stand-in or a placeholder that refuses the variant when reached.

A source that cannot be loaded raises :class:`ManagerSourceError`, one line.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass, field
from typing import Any

from kvqueue.schema import split_name
from kvqueue.sources import stand_ins
from kvqueue.sources.loader import Variant
from kvqueue.sources.module_graph import (
    UTILS_MODULE,
    Graph,
    LoadError,
    SourceTexts,
    queue_swap,
    read_members,
    sha256_text,
    stack_sha256,
)
from kvqueue.sources.versions import below_floor

MANAGER_CLASS = "KVCacheManager"
#: The oldest release whose manager this loader drives, found by running each: 0.8.5's
#: ``allocate_slots`` takes ``(request, num_tokens, new_computed_blocks)``, not the
#: ``num_new_tokens`` / ``num_new_computed_tokens`` keywords every release from 0.9.0 on
#: takes, and 0.8.0 and older have no ``KVCacheGroupSpec`` to build a config from.
FIRST_RELEASE = "0.9.0"
MANAGER_MODULE = "vllm.v1.core.kv_cache_manager"
POOL_MEMBER = "vllm/v1/core/block_pool.py"
#: What a manager reads of a source, in fetch order; :data:`REQUIRED` must be there (a
#: release lacks the files that came later, e.g. ``token_buffer.py`` before 0.33).
MEMBERS = (
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    POOL_MEMBER,
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/kv_cache_metrics.py",
    "vllm/v1/request.py",
    "vllm/v1/kv_cache_interface.py",
    "vllm/v1/utils.py",
    "vllm/v1/metrics/stats.py",
    "vllm/v1/kv_cache_spec_registry.py",
    "vllm/v1/kv_cache_layout.py",
    "vllm/v1/token_buffer.py",
    "vllm/envs.py",
    "vllm/utils.py",
    "vllm/utils/__init__.py",
    "vllm/utils/math_utils.py",
    "vllm/utils/hashing.py",
    "vllm/utils/gc_utils.py",
)
#: A stack runs its release's ``Request`` and KV cache specs: a folder of
#: ``vllm/v1/core`` alone is refused naming the first of these it lacks (it failed on
#: a stubbed module's ``__name__`` before).
REQUIRED = (MEMBERS[0], "vllm/v1/request.py", "vllm/v1/kv_cache_interface.py")
#: Where a release's engine config declares ``CacheConfig.prefix_caching_hash_algo``
#: (a package from 0.10.1, one module before). Parsed for that default, never run: the
#: engine hashes prompts with it, and it changed from ``builtin`` to ``sha256`` in
#: 0.10.2, one release after requests began hashing their own blocks (0.10.1).
CONFIG_MEMBERS = ("vllm/config/cache.py", "vllm/config.py")
#: Big modules of which only the imported definitions run (the rest imports most of vLLM).
CUT = frozenset(
    {
        UTILS_MODULE,
        "vllm.utils",
        "vllm.utils.gc_utils",
        "vllm.v1.utils",
        "vllm.v1.metrics.stats",
    }
)
SWAPS = ("+queue=", "+pool=")
#: What the adapter (:mod:`kvqueue.subjects.manager_api`) reads of the cut
#: ``kv_cache_utils.py`` where the release defines it: requests hash their own blocks
#: from 0.10.1 on, with a hasher the engine builds.
HARNESS = {
    UTILS_MODULE: ("get_request_block_hasher", "init_none_hash"),
    # 0.18 on: in vllm/utils/hashing.py (whole); 0.10.1-0.17: in vllm/utils itself (cut).
    "vllm.utils": ("get_hash_fn_by_name",),
}


class ManagerSourceError(ValueError):
    """A manager source cannot be loaded; the message is one line naming what failed."""


@dataclass(frozen=True)
class ManagerVariant:
    """One ``KVCacheManager`` stack under test.

    Attributes
    ----------
    label, source
        The label shown in tables and the manager source string (swaps included).
    texts
        The members read from the source (a swapped pool's ``block_pool.py`` included).
    graph
        The loaded modules.
    queue
        The swapped-in queue (a :class:`kvqueue.sources.loader.Variant`), or None.
    swapped
        The swaps by part: ``{"queue": SOURCE, "pool": SOURCE}`` (those given).
    hash_algo
        The release's default ``prefix_caching_hash_algo`` and the file it was read
        from, or None where the source holds no engine config (:func:`default_hash_algo`).
    """

    label: str
    source: str
    texts: SourceTexts
    graph: Graph
    queue: Variant | None = None
    swapped: dict[str, str] = field(default_factory=dict)
    hash_algo: tuple[str, str] | None = None

    def module(self, name: str) -> types.ModuleType:
        """A module of the stack (``vllm.v1.request``, ``vllm.v1.kv_cache_interface``)."""
        return self.graph.module(name)

    @property
    def manager_cls(self) -> type:
        """The ``KVCacheManager`` class."""
        return self.graph.module(MANAGER_MODULE).__dict__[MANAGER_CLASS]

    @property
    def sha256(self) -> str:
        """One digest of everything the stack runs: each member's sha256 and the swapped
        queue class's (what the gate checked and the workers compare before timing)."""
        return stack_sha256({m.path: m.sha256 for m in self.graph.members.values()}, self.queue)

    @property
    def code_sha256(self) -> str:
        """sha256 of the code the stack runs (a history's version key)."""
        queue = "" if self.queue is None else self.queue.queue_src.sha256
        return sha256_text(self.graph.code_sha256() + queue)

    def provenance(self) -> dict[str, Any]:
        """Return a JSON-ready record of where this stack's code came from."""
        kv_utils = self.graph.members.get(UTILS_MODULE)
        return {
            "label": self.label,
            "source": self.source,
            # Where kv_cache_manager.py was read, as a queue's class file or a pool's
            # block_pool.py is recorded: a cached release file, a folder's file, or
            # REPO@COMMIT:MEMBER for git:REPO@REF (kvqueue.schema.git_commit_of reads it).
            "resolved_path": self.texts.members[REQUIRED[0]].where,
            "vllm_version": self.texts.vllm_version,
            **self.graph.provenance(),
            "swapped": dict(self.swapped),
            "hash_algo": None if self.hash_algo is None else list(self.hash_algo),
            "sha256": self.sha256,
            "code_sha256": self.code_sha256,
            "class_name": MANAGER_CLASS,
            "class_sha256": self.sha256,
            "file_sha256": None if kv_utils is None else kv_utils.sha256,
            "queue_source": None if self.queue is None else self.queue.source,
            "queue_class_sha256": None if self.queue is None else self.queue.queue_src.sha256,
        }


def split_swaps(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``"SRC+queue=Q+pool=P"`` into ``("SRC", {"queue": "Q", "pool": "P"})``.

    Raises
    ------
    ManagerSourceError
        An empty part or a swap given twice.
    """
    base, swaps = spec, {}
    while True:
        cuts = [(base.rfind(s), s) for s in SWAPS if base.rfind(s) >= 0]
        if not cuts:
            break
        at, sep = max(cuts)
        kind, value = sep.strip("+="), base[at + len(sep) :]
        if not value or kind in swaps:
            raise ManagerSourceError(
                f"'{spec}': a swap is +queue=SOURCE or +pool=SOURCE, each at most once"
            )
        swaps[kind] = value
        base = base[:at]
    if not base:
        raise ManagerSourceError(f"'{spec}' names no manager before its swap")
    return base, swaps


def _check_release(source: str, what: str) -> None:
    if below_floor(source, FIRST_RELEASE):
        raise ManagerSourceError(
            f"{source}: {what} subjects start at vLLM {FIRST_RELEASE} (older managers "
            "take allocate_slots(request, num_tokens, ...), an API this adapter does not call)"
        )
    if source in ("kvqueue", "kvqueue:floor"):
        raise ManagerSourceError(
            f"'{source}' is a queue, not a manager: swap it into a release's manager, "
            f"e.g. vllm==0.34.0+queue={source}"
        )


def load_manager(source: str, label: str | None = None) -> ManagerVariant:
    """Load the ``KVCacheManager`` stack of a manager source.

    Parameters
    ----------
    source
        A manager source string (module docstring), ``NAME=`` and swaps included.
    label
        The label; defaults to the source's ``NAME=`` or the source string.

    Returns
    -------
    ManagerVariant

    Raises
    ------
    ManagerSourceError
        One line naming the release, member, definition or swap that failed.
    """
    name, spec = split_name(source)
    base, swaps = split_swaps(spec)
    _check_release(base, "manager")
    try:
        texts = read_members(base, MEMBERS, REQUIRED)
        members = {m.module: m for m in texts.members.values()}
        pool_source = swaps.get("pool")
        if pool_source is not None:
            _check_release(pool_source, "pool")
            pool_texts = read_members(pool_source, (POOL_MEMBER,), (POOL_MEMBER,))
            pool_member = pool_texts.members[POOL_MEMBER]
            members[pool_member.module] = pool_member
        holder: dict[str, Variant] = {}
        after_cut = None
        queue_source = swaps.get("queue")
        if queue_source is not None:
            after_cut = queue_swap(queue_source, base, texts, holder)
        graph = Graph(members, CUT, stand_ins.stub_table(), after_cut=after_cut, harness=HARNESS)
        module = graph.module(MANAGER_MODULE)
        hash_algo = default_hash_algo(read_members(base, CONFIG_MEMBERS, ()))
    except LoadError as exc:
        raise ManagerSourceError(str(exc)) from None
    if MANAGER_CLASS not in module.__dict__:
        raise ManagerSourceError(f"class {MANAGER_CLASS} not found in {base}'s kv_cache_manager.py")
    return ManagerVariant(
        label=label or name or spec,
        source=spec,
        texts=texts,
        graph=graph,
        queue=holder.get("queue"),
        swapped=swaps,
        hash_algo=hash_algo,
    )


def default_hash_algo(texts: SourceTexts) -> tuple[str, str] | None:
    """``CacheConfig.prefix_caching_hash_algo``'s default in the config files of
    ``texts`` (:data:`CONFIG_MEMBERS`, parsed only), with the file it came from; None
    when no file declares one (a checkout of ``vllm/v1/core`` alone)."""
    for path in CONFIG_MEMBERS:
        text = texts.text(path)
        if text is None:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ClassDef) and node.name == "CacheConfig"):
                continue
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and stmt.target.id == "prefix_caching_hash_algo"
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    return stmt.value.value, texts.members[path].where
    return None
