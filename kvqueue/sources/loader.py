"""Turn a *source string* into a queue class, with provenance.

Source strings (docs/design.md §2):

==========================  ==========================================================
``vllm==0.31.0``            class from that vLLM release (fetched once, cached)
``path/to/file.py``         class from a file; ``FILE::ClassName`` picks another class
``git:REPO@REF``            ``vllm/v1/core/kv_cache_utils.py`` at commit REF of REPO
``kvqueue``                 this project's queue (``kvqueue/subjects/our_queue.py``)
``kvqueue:floor``           the check-free lower bound (a *bound*, not a candidate)
==========================  ==========================================================

Any source may end in ``::ClassName`` and start with a name, ``NAME=SOURCE``
(``base=git:~/vllm@main``): the name is the variant's label in tables, figures and the
writeup, and the source is recorded beside it. Classes are cut out of the source text with
``ast`` (decorators included) and executed in a fresh module registered in
``sys.modules``: upstream's module imports half of vLLM, so it cannot be imported.
By default (block mode ``shared``) all variants of a run bind ``KVCacheBlock`` to ONE
block class, so the measured difference is the queue code alone; in block mode ``own``
every variant binds the ``KVCacheBlock`` of its own source (what that release really ran:
a release history needs 0.9.x's dataclass ``__eq__``, the cost vLLM PR #21005 removed).

Older APIs (docs/design.md §2): a class without ``popleft_n`` / ``append_n`` (vLLM before
0.10.0) is driven the way that release's own ``BlockPool`` drove it, by loops of
``popleft`` / ``append``: a subclass made at load time (:data:`ADAPTER_POPLEFT_LOOP`),
named in the variant's provenance, never silent. ``prepend_n`` and ``iter_blocks_after``
(vLLM 0.23.0 and 0.26.0) have no adapter: a class without them is loaded, the gate skips
the checks that need them and says so, and a case that needs one is refused. A class
whose text names ``free_list_head`` but no sentinel (vLLM before 0.10.0) has the
*head-tail* structure (first and last block held in ``free_list_head`` /
``free_list_tail``, ``None`` links at the ends) instead of sentinel blocks.

Standard library only (the gate and the worker run this under the measured interpreter).
"""

from __future__ import annotations
import __future__

import ast
import hashlib
import os
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

from kvqueue.schema import BLOCK_MODES, split_name, variant_labels
from kvqueue.sources.fetch_errors import FetchError
from kvqueue.sources.release_cache import MEMBER
from kvqueue.sources.release_fetch import fetch_release

QUEUE_CLASS = "FreeKVCacheBlockQueue"
BLOCK_CLASS = "KVCacheBlock"
FLOOR_CLASS = "FloorKVCacheBlockQueue"
#: Public queue API (docs/design.md §1).
QUEUE_METHODS = (
    "popleft",
    "popleft_n",
    "remove",
    "append",
    "append_n",
    "prepend_n",
    "get_all_free_blocks",
    "iter_blocks_after",
)
#: Methods every variant must have itself (every vLLM release with the queue has them).
CORE_METHODS = ("popleft", "remove", "append", "get_all_free_blocks")
#: Methods an adapter supplies when a class lacks them: method -> adapter name.
ADAPTED_METHODS = {"popleft_n": "popleft-loop", "append_n": "popleft-loop"}
#: The one adapter: ``popleft_n(n)`` = n ``popleft()`` calls, ``append_n(blocks)`` = one
#: ``append()`` per block, as vLLM's ``BlockPool`` drove the queue before 0.10.0.
ADAPTER_POPLEFT_LOOP = "popleft-loop"
#: Methods a variant may lack (no adapter): the gate skips their checks, and no timed
#: case uses them (``queue_cases.case_methods``).
OPTIONAL_METHODS = ("prepend_n", "iter_blocks_after")
#: Link structures: sentinel blocks (vLLM 0.10.0 on) or head/tail attributes (before).
STRUCTURE_SENTINELS = "sentinels"
STRUCTURE_HEAD_TAIL = "head-tail"
#: Block modes: one block class for every variant, or each variant's own.
# Not resolved: a counted process imports kvqueue through a link of fixed path length
# (kvqueue.measure.cachegrind._fixed_root), and the checkout's own path would be back.
_SUBJECT_DIR = Path(__file__).parent.parent / "subjects"
_OWN_FILE = _SUBJECT_DIR / "our_queue.py"
_OWN_BLOCK_FILE = _SUBJECT_DIR / "stand_in_block.py"

# Names the extracted classes may need at definition time. Annotations are compiled
# lazily (PEP 563), so names such as BlockHashWithGroupId never have to resolve.
_PRELUDE = (
    "from dataclasses import dataclass, field\n"
    "from collections.abc import Iterable, Iterator, Sequence, Callable\n"
    "from typing import Any, NamedTuple, Optional, TYPE_CHECKING\n"
)


class SourceError(ValueError):
    """A source string cannot be turned into a queue class; the message is one line."""


@dataclass(frozen=True)
class ClassSource:
    """The text of one class cut out of a file, and where it came from."""

    source: str
    path: str
    class_name: str
    text: str
    vllm_version: str | None
    file_sha256: str
    first_line: int = 1

    @property
    def sha256(self) -> str:
        """sha256 of the class's own source text (decorators included)."""
        return hashlib.sha256(self.text.encode()).hexdigest()


@dataclass(frozen=True)
class Variant:
    """One queue class under test, ready to instantiate."""

    label: str
    source: str
    queue_cls: type
    block_cls: type
    queue_src: ClassSource
    block_src: ClassSource
    is_bound: bool = False
    #: :data:`ADAPTER_POPLEFT_LOOP` when the class lacks ``popleft_n``/``append_n``.
    adapter: str | None = None
    #: The methods the adapter supplies.
    adapted: tuple[str, ...] = ()
    #: Methods of :data:`OPTIONAL_METHODS` the class lacks (the gate skips their checks).
    missing: tuple[str, ...] = ()
    #: :data:`STRUCTURE_SENTINELS` or :data:`STRUCTURE_HEAD_TAIL`.
    structure: str = STRUCTURE_SENTINELS

    def has(self, method: str) -> bool:
        """Whether the class has ``method`` itself (not through an adapter)."""
        return method not in self.missing and method not in self.adapted

    def can(self, method: str) -> bool:
        """Whether ``method`` can be called (the class's own or the adapter's)."""
        return method not in self.missing

    def provenance(self) -> dict:
        """Return a JSON-ready record of where this variant's code came from."""
        return {
            "label": self.label,
            "source": self.source,
            "resolved_path": self.queue_src.path,
            "class_name": self.queue_src.class_name,
            "vllm_version": self.queue_src.vllm_version,
            "class_sha256": self.queue_src.sha256,
            "file_sha256": self.queue_src.file_sha256,
            "block_source": self.block_src.source,
            "block_class_sha256": self.block_src.sha256,
            "is_bound": self.is_bound,
            "adapter": self.adapter,
            "adapted_methods": list(self.adapted),
            "missing_methods": list(self.missing),
            "structure": self.structure,
        }


def split_class(source: str) -> tuple[str, str | None]:
    """Split ``"SOURCE::ClassName"`` into ``("SOURCE", "ClassName")``."""
    if "::" in source:
        base, _, cls = source.rpartition("::")
        if not cls.isidentifier():
            raise SourceError(f"'{cls}' in '{source}' is not a class name")
        return base, cls
    return source, None


def read_source(source: str, class_name: str | None = None) -> ClassSource:
    """Read the text of one class named by a source string.

    Parameters
    ----------
    source
        A source string (see module docstring); a ``::ClassName`` suffix overrides
        ``class_name``.
    class_name
        Class to cut out when the source names none; defaults to the queue class.

    Returns
    -------
    ClassSource

    Raises
    ------
    SourceError
        Unknown release, no network and no cache, file or class not found, syntax error.
    """
    base, explicit = split_class(source)
    wanted = explicit or class_name or QUEUE_CLASS
    version = None
    if base.startswith("vllm=="):
        version = base[len("vllm==") :]
        try:
            path = fetch_release(version)
        except FetchError as exc:
            raise SourceError(str(exc)) from None
        raw, where = path.read_bytes(), str(path)
    elif base.startswith("git:"):
        raw, where = _read_git(base)
    elif base in ("kvqueue", "kvqueue:floor"):
        if base == "kvqueue:floor" and explicit is None:
            wanted = FLOOR_CLASS if wanted == QUEUE_CLASS else wanted
        path = _OWN_BLOCK_FILE if wanted == BLOCK_CLASS else _OWN_FILE
        raw, where = path.read_bytes(), str(path)
    else:
        path = Path(base).expanduser()
        if not path.is_file():
            raise SourceError(
                f"'{base}' is not a file, nor a known source "
                "(vllm==X.Y.Z, git:REPO@REF, kvqueue, kvqueue:floor)"
            )
        raw, where = path.read_bytes(), str(path.resolve())
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{where} is not UTF-8 text") from None
    cut, first_line = _cut_class(text, wanted, where)
    return ClassSource(
        source=source,
        path=where,
        class_name=wanted,
        text=cut,
        vllm_version=version,
        file_sha256=hashlib.sha256(raw).hexdigest(),
        first_line=first_line,
    )


def git_commit(base: str, member: str) -> tuple[str, str, str]:
    """``(repo, ref, commit)`` of a ``git:REPO@REF`` source whose ``member`` is read, the
    ref resolved to its commit (HEAD or a branch names another commit tomorrow, and the
    record must say which commit was measured).

    Raises
    ------
    SourceError
        Not of that form, a ref that git would read as an option, no such folder, a
        folder that is not a git repository, no such commit; one line.
    """
    repo, sep, ref = base[len("git:") :].rpartition("@")
    if not sep or not repo or not ref:
        raise SourceError(f"'{base}' is not of the form git:REPO_PATH@REF")
    if ref.startswith("-"):
        # Would be read by git as an option, not a revision.
        raise SourceError(f"git ref '{ref}' must not start with '-'")
    # Make hands a source over verbatim (never through a shell), so a `~` the README's
    # `git:~/vllm@mine` writes arrives unexpanded: expand it as a shell would.
    repo = str(Path(repo).expanduser())
    if not Path(repo).is_dir():
        if Path(repo).exists():
            raise SourceError(f"git repository '{repo}' is a file, not a repository's folder")
        raise SourceError(f"git repository '{repo}' does not exist")
    commit = _git_out(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if not commit:
        if not _git_out(repo, "rev-parse", "--git-dir"):  # asked only when the ref failed
            raise SourceError(
                f"'{repo}' is not a git repository (git:REPO@REF reads a commit of one)"
            )
        raise SourceError(f"cannot read {member} at '{ref}' in {repo}: no such commit")
    return repo, ref, commit


def _run_git(repo: str, *args: str) -> tuple[int, bytes, bytes]:
    """``git -C repo ARGS``: its status, stdout and stderr.

    The output goes to anonymous in-memory files, read whole once git has exited, never
    through a pipe: a pipe is read in as many chunks as git happened to have written at
    each read, so what a counted process executed depended on timing (two identical zero
    runs of a git-sourced manager differed by 43,900 instructions per operation of
    sweep1000, a pool's by 267, a queue's by 0.5; 0 with in-memory files).
    """
    fds = [_anonymous_file(), _anonymous_file()]
    try:
        status = subprocess.run(
            ["git", "-C", repo, *args], stdin=subprocess.DEVNULL, stdout=fds[0], stderr=fds[1]
        ).returncode
        out, err = (os.pread(fd, os.fstat(fd).st_size, 0) for fd in fds)
        return status, out, err
    finally:
        for fd in fds:
            os.close(fd)


def _anonymous_file() -> int:
    """A file descriptor of an anonymous file (memfd; an unlinked temp file without it)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("kvqueue-git")
    fd, name = tempfile.mkstemp(prefix="kvqueue-git-")
    os.unlink(name)
    return fd


def _git_out(repo: str, *args: str) -> str:
    """git's stripped output of ``git -C repo ARGS``, or ``""`` when it fails."""
    status, out, _ = _run_git(repo, *args)
    return out.decode("utf-8", "replace").strip() if status == 0 else ""


def git_show(repo: str, commit: str, member: str) -> tuple[bytes | None, str]:
    """``member``'s bytes at ``commit`` (``None`` when git cannot show it) and git's
    reason when it cannot."""
    status, out, err = _run_git(repo, "show", f"{commit}:{member}")
    if status == 0:
        return out, ""
    lines = err.decode(errors="replace").strip().splitlines()
    return None, (lines or ["git show failed"])[-1]


def _read_git(base: str) -> tuple[bytes, str]:
    """Read ``vllm/v1/core/kv_cache_utils.py`` at REF from ``git:REPO@REF``."""
    repo, ref, commit = git_commit(base, MEMBER)
    raw, reason = git_show(repo, commit, MEMBER)
    if raw is None:
        raise SourceError(f"cannot read {MEMBER} at '{ref}' in {repo}: {reason}")
    where = f"{Path(repo).resolve()}@{commit}:{MEMBER}"
    return raw, where if commit.startswith(ref) else f"{where} (ref {ref})"


def _cut_class(text: str, class_name: str, where: str) -> tuple[str, int]:
    """Return the source of top-level class ``class_name`` (decorators included) and
    the line number it starts on."""
    try:
        tree = ast.parse(text, filename=where)
    except SyntaxError as exc:
        raise SourceError(f"syntax error in {where} line {exc.lineno}: {exc.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            lines = text.splitlines(keepends=True)
            return "".join(lines[start - 1 : node.end_lineno]), start
    raise SourceError(f"class {class_name} not found in {where}")


_counter = 0


def _exec_class(cls_src: ClassSource, bindings: dict[str, object]) -> type:
    """Execute one class's source in a fresh module and return the class."""
    global _counter
    _counter += 1
    name = f"kvqueue._variants.v{_counter}_{cls_src.class_name}"
    module = types.ModuleType(name)
    module.__file__ = cls_src.path
    # Registered so dataclasses, pickling and tracebacks can find the module.
    sys.modules[name] = module
    exec(compile(_PRELUDE, "<kvqueue prelude>", "exec"), module.__dict__)
    module.__dict__.update(bindings)
    # Pad with blank lines so tracebacks point at the real line numbers of the file.
    code = compile(
        "\n" * (cls_src.first_line - 1) + cls_src.text,
        cls_src.path,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        raise SourceError(
            f"class {cls_src.class_name} from {cls_src.path} failed to execute: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return module.__dict__[cls_src.class_name]


def load_block_class(source: str) -> tuple[type, ClassSource]:
    """Load the ``KVCacheBlock`` class of a source (``kvqueue`` uses
    ``kvqueue/subjects/stand_in_block.py``)."""
    base, _ = split_class(split_name(source)[1])
    block_src = read_source(base, BLOCK_CLASS)
    return _exec_class(block_src, {}), block_src


# The adapter's text, executed in the variant's own module at every load (so a new
# layout gets new function objects, as the class does). The loops are BlockPool's
# (get_new_blocks: one popleft() per block into a list; free_blocks: one append() per
# block), without its bookkeeping of ref counts and hashes.
_ADAPTER_TEXT = {
    "popleft_n": (
        "    def popleft_n(self, n):\n"
        "        ret = []\n"
        "        for _ in range(n):\n"
        "            ret.append(self.popleft())\n"
        "        return ret\n"
    ),
    "append_n": (
        "    def append_n(self, blocks):\n"
        "        for block in blocks:\n"
        "            self.append(block)\n"
    ),
}


def _adapt(cls: type, methods: tuple[str, ...], module_name: str) -> type:
    """Return a subclass of ``cls`` that adds ``methods`` from :data:`_ADAPTER_TEXT`."""
    text = f"class {cls.__name__}(_AdaptedBase):\n" + "".join(_ADAPTER_TEXT[m] for m in methods)
    namespace = sys.modules[module_name].__dict__
    namespace["_AdaptedBase"] = cls
    exec(compile(text, f"<kvqueue adapter {ADAPTER_POPLEFT_LOOP}>", "exec"), namespace)
    adapted = namespace[cls.__name__]
    adapted.__qualname__ = f"{cls.__qualname__}+{ADAPTER_POPLEFT_LOOP}"
    return adapted


def structure_of(cls_src: ClassSource) -> str | None:
    """The link structure a queue class's text uses (see the module docstring), or
    None when its text names neither sentinels nor ``free_list_head``."""
    text = cls_src.text
    if "fake_free_list_head" in text:
        return STRUCTURE_SENTINELS
    if "free_list_head" in text:
        return STRUCTURE_HEAD_TAIL
    return None


def load_variant(
    source: str,
    block: tuple[type, ClassSource],
    label: str | None = None,
) -> Variant:
    """Load one queue class bound to the given block class.

    A class without ``popleft_n`` / ``append_n`` gets the :data:`ADAPTER_POPLEFT_LOOP`
    adapter; one without ``prepend_n`` / ``iter_blocks_after`` is loaded with those
    recorded as missing.

    Parameters
    ----------
    source
        The source string.
    block
        ``(block_cls, block_source)`` this variant's queue links.
    label
        Name of the variant in the data; defaults to the source's ``NAME=`` or the
        source string itself.

    Raises
    ------
    SourceError
        As :func:`read_source`, or the class lacks a method of :data:`CORE_METHODS`.
    """
    name, source = split_name(source)
    queue_src = read_source(source)
    cls = _exec_class(queue_src, {BLOCK_CLASS: block[0]})
    absent = tuple(m for m in QUEUE_METHODS if not callable(getattr(cls, m, None)))
    if any(m in CORE_METHODS for m in absent):
        raise SourceError(
            f"class {queue_src.class_name} from {queue_src.path} lacks queue method(s): "
            + ", ".join(absent)
        )
    structure = structure_of(queue_src)
    if structure is None:
        raise SourceError(
            f"class {queue_src.class_name} from {queue_src.path} is not a linked free-block "
            "queue (it names neither fake_free_list_head nor free_list_head)"
            + (f"; it lacks queue method(s): {', '.join(absent)}" if absent else "")
        )
    adapted = tuple(m for m in absent if m in ADAPTED_METHODS)
    if adapted:
        cls = _adapt(cls, adapted, cls.__module__)
    return Variant(
        label=label or name or source,
        source=source,
        queue_cls=cls,
        block_cls=block[0],
        queue_src=queue_src,
        block_src=block[1],
        is_bound=queue_src.class_name == FLOOR_CLASS,
        adapter=ADAPTER_POPLEFT_LOOP if adapted else None,
        adapted=adapted,
        missing=tuple(m for m in absent if m in OPTIONAL_METHODS),
        structure=structure,
    )


def load_variants(
    sources: list[str], block_source: str | None = None, block_mode: str = "shared"
) -> list[Variant]:
    """Load every source of a run; the first is the baseline.

    Parameters
    ----------
    sources
        Source strings, baseline first. The same source may appear twice (A/A pair).
    block_source
        Where the shared ``KVCacheBlock`` comes from; defaults to the baseline source.
        Only with ``block_mode="shared"``.
    block_mode
        ``"shared"`` (one block class for all) or ``"own"`` (each source's own
        ``KVCacheBlock``; ``kvqueue`` sources use ``kvqueue/subjects/stand_in_block.py``).

    Returns
    -------
    list of Variant
    """
    if not sources:
        raise SourceError("no variant sources given")
    if block_mode not in BLOCK_MODES:
        raise SourceError(f"block mode {block_mode!r} is not one of {', '.join(BLOCK_MODES)}")
    if block_mode == "own":
        if block_source:
            raise SourceError("a block source is given, but block mode 'own' uses each variant's")
        return [
            load_variant(src, load_block_class(src), label)
            for src, label in zip(sources, variant_labels(sources), strict=True)
        ]
    block = load_block_class(block_source or sources[0])
    return [
        load_variant(src, block, label)
        for src, label in zip(sources, variant_labels(sources), strict=True)
    ]
