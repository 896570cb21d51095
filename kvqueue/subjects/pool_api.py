"""How to call a ``BlockPool`` of any release: by keyword, from its own signatures.

vLLM's pool API drifted (docs/appendix-pool.md); :func:`pool_api` reads a pool
class's signatures once and returns a :class:`PoolAPI` that calls every release the same
way:

- ``__init__``: ``hash_block_size`` is a required third argument from 0.18.0,
  ``num_hash_lookahead_tokens`` was inserted before ``medium`` in 0.33.0: every argument is
  passed by keyword, and only the ones the signature names; a *required* argument this
  module does not know is refused.
- ``cache_full_blocks``: ``block_hashes`` and ``hash_fn`` until 0.10.1 (0.10.2 reads
  ``request.block_hashes`` instead), ``block_mask`` from 0.25.0 (left at its default).
- ``touch``: a tuple of per-group lists in 0.10.x (``tuple[list[KVCacheBlock], ...]``),
  then a flat sequence; told apart by the annotation.
- ``BlockHash``: a ``NamedTuple`` (``hash_value``, ``token_ids``, ``extra_keys``) until
  0.10.x, then ``NewType`` over ``bytes``; :meth:`PoolAPI.block_hash` makes one from an
  integer label, :meth:`PoolAPI.key_label` reads the label back from a hash-map key.
- the hash map: a ``defaultdict`` of ``{block_id: block}`` (0.10.x), then
  ``BlockHashToBlockMap`` whose ``_cache`` values are a block or such a dict, then
  (0.34.0) a block id, the ids of a key cached by several blocks kept in ``_dup_ids``.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The adaptations, by name, as a pool's provenance lists them.
ADAPT_HASH_BLOCK_SIZE = "init:hash_block_size"
ADAPT_BLOCK_HASHES_ARG = "cache_full_blocks:block_hashes+hash_fn"
ADAPT_TOUCH_GROUPS = "touch:tuple-of-lists"
ADAPT_HASH_NAMEDTUPLE = "BlockHash:NamedTuple"
#: Arguments of ``__init__`` this module knows (every other must have a default).
_INIT_KNOWN = frozenset(
    {
        "num_gpu_blocks",
        "enable_caching",
        "hash_block_size",
        "enable_kv_cache_events",
        "metrics_collector",
        "num_hash_lookahead_tokens",
        "medium",
    }
)
_CACHE_KNOWN = frozenset(
    {
        "request",
        "blocks",
        "block_hashes",
        "num_cached_blocks",
        "num_full_blocks",
        "block_size",
        "kv_cache_group_id",
        "hash_fn",
        "block_mask",
    }
)
#: Bytes of a ``bytes`` block hash (vLLM's are sha256 digests).
HASH_BYTES = 32


class PoolAPIError(TypeError):
    """A pool's API is not one this adapter knows; the message names the signature."""


@dataclass
class PoolRequest:
    """The request object handed to ``cache_full_blocks`` (our own, duck-typed).

    Attributes
    ----------
    request_id
        A name, for vLLM's assertion messages.
    block_hashes
        The request's block hashes (in the pool's ``BlockHash`` type), one per full block.
    all_token_ids
        Token ids (read only for events and, in 0.10.x, to hash missing blocks).
    """

    request_id: str
    block_hashes: list[Any]
    all_token_ids: list[int] = field(default_factory=list)
    lora_request: Any = None
    mm_features: list[Any] = field(default_factory=list)
    cache_salt: Any = None
    session_id: Any = None


def _params(func: Callable[..., Any], where: str) -> dict[str, inspect.Parameter]:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise PoolAPIError(f"{where}: no readable signature ({exc})") from None
    return {n: p for n, p in sig.parameters.items() if n != "self"}


def _required(params: dict[str, inspect.Parameter]) -> set[str]:
    return {
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }


def _touch_takes_groups(annotation: Any) -> bool | None:
    """True for ``tuple[list[...], ...]``, False for a flat sequence, None if unknown."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        if text.startswith(("tuple[list", "Tuple[List")):
            return True
        flat = text in ("list", "Sequence", "Iterable")
        return False if flat or text.startswith(("Sequence[", "list[", "Iterable[")) else None
    if annotation in (list, Sequence, Iterable):
        return False
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return True
    return False if origin is not None else None


@dataclass(frozen=True)
class PoolAPI:
    """Calls one pool class by keyword, whatever its release (see the module docstring).

    Build it with :func:`pool_api`.
    """

    pool_cls: type
    block_hash_type: Any
    init_params: frozenset[str]
    cache_params: frozenset[str]
    touch_groups: bool
    hash_is_namedtuple: bool
    adaptations: tuple[str, ...]
    #: key -> label, filled as keys are read (the gate reads every block's hash after
    #: every call: 2.6 M reads at 2,048 blocks, 4.2 s of a 31 s profile unmemoised).
    _labels: dict[Any, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def new_pool(
        self, num_gpu_blocks: int, enable_caching: bool = True, hash_block_size: int = 16
    ) -> Any:
        """Construct a pool, events off and no metrics collector."""
        kwargs: dict[str, Any] = {
            "num_gpu_blocks": num_gpu_blocks,
            "enable_caching": enable_caching,
        }
        if "hash_block_size" in self.init_params:
            kwargs["hash_block_size"] = hash_block_size
        if "enable_kv_cache_events" in self.init_params:
            kwargs["enable_kv_cache_events"] = False
        return self.pool_cls(**kwargs)

    def block_hash(self, label: int) -> Any:
        """The pool's ``BlockHash`` for integer ``label`` (distinct labels, distinct hashes)."""
        if self.hash_is_namedtuple:
            return self.block_hash_type(hash_value=label, token_ids=(label,), extra_keys=None)
        return self.block_hash_type(label.to_bytes(HASH_BYTES, "big"))

    def key_label(self, key: Any) -> tuple[int, int]:
        """``(label, group id)`` of a hash-map key (``BlockHashWithGroupId``)."""
        found = self._labels.get(key)
        if found is None:
            if self.hash_is_namedtuple:
                found = key.block_hash.hash_value, key.group_id
            else:
                found = int.from_bytes(key[:-4], "big"), int.from_bytes(key[-4:], "big")
            self._labels[key] = found
        return found

    def cache_full_blocks(
        self,
        pool: Any,
        request: PoolRequest,
        blocks: list[Any],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int = 0,
    ) -> None:
        """Call ``cache_full_blocks`` by keyword with the arguments its release takes."""
        kwargs: dict[str, Any] = {
            "request": request,
            "blocks": blocks,
            "num_cached_blocks": num_cached_blocks,
            "num_full_blocks": num_full_blocks,
            "block_size": block_size,
            "kv_cache_group_id": kv_cache_group_id,
        }
        if "block_hashes" in self.cache_params:
            kwargs["block_hashes"] = request.block_hashes
        if "hash_fn" in self.cache_params:
            kwargs["hash_fn"] = no_hash_fn
        pool.cache_full_blocks(**kwargs)

    def touch(self, pool: Any, blocks: Sequence[Any]) -> None:
        """Touch ``blocks`` (one KV cache group), in the shape the release takes."""
        pool.touch((list(blocks),) if self.touch_groups else list(blocks))

    def get_cached_block(self, pool: Any, label: int) -> Any:
        """The first cached block of ``label`` in group 0, or None."""
        found = pool.get_cached_block(self.block_hash(label), [0])
        return None if not found else found[0]

    def hash_entries(self, pool: Any) -> dict[Any, tuple[int, ...]]:
        """The hash map as ``{key: sorted block ids}``, whatever its representation."""
        mapping = pool.cached_block_hash_to_block
        raw = mapping if isinstance(mapping, dict) else getattr(mapping, "_cache", None)
        if not isinstance(raw, dict):
            raise PoolAPIError(f"cannot read a hash map of type {type(mapping).__name__}")
        dups = getattr(mapping, "_dup_ids", None) or {}
        out = {}
        for key, value in raw.items():
            if key in dups:
                out[key] = tuple(sorted(dups[key]))
            elif isinstance(value, dict):
                out[key] = tuple(sorted(value))
            elif isinstance(value, int):
                out[key] = (value,)
            else:
                out[key] = (value.block_id,)
        return out


def no_hash_fn(*args: Any) -> Any:
    """The ``hash_fn`` passed to 0.10.0's ``cache_full_blocks``: never called, since
    every block's hash is passed in ``block_hashes``."""
    raise AssertionError("hash_fn called: a block hash was missing from block_hashes")


def _method(pool_cls: type, name: str) -> Callable[..., Any]:
    method = getattr(pool_cls, name, None)
    if not callable(method):
        raise PoolAPIError(f"BlockPool has no method {name}")
    return method


def pool_api(pool_cls: type, utils: Any) -> PoolAPI:
    """Read a pool class's signatures and its release's ``BlockHash`` type.

    Parameters
    ----------
    pool_cls
        The ``BlockPool`` class.
    utils
        The module that answers ``vllm.v1.core.kv_cache_utils`` for it (``BlockHash``).

    Returns
    -------
    PoolAPI

    Raises
    ------
    PoolAPIError
        One line naming the signature or type this adapter does not know.
    """
    init = _params(pool_cls.__init__, "BlockPool.__init__")
    unknown = sorted(_required(init) - _INIT_KNOWN)
    if unknown or not {"num_gpu_blocks", "enable_caching"} <= set(init):
        why = f"required argument(s) {', '.join(unknown)} unknown to the adapter"
        raise PoolAPIError(
            f"BlockPool.__init__({', '.join(init)}): "
            + (why if unknown else "no num_gpu_blocks or enable_caching")
        )
    cache = _params(_method(pool_cls, "cache_full_blocks"), "BlockPool.cache_full_blocks")
    unknown = sorted(_required(cache) - _CACHE_KNOWN)
    if unknown or "blocks" not in cache:
        why = f"required argument(s) {', '.join(unknown)} unknown to the adapter"
        raise PoolAPIError(
            f"BlockPool.cache_full_blocks({', '.join(cache)}): {why if unknown else 'no blocks'}"
        )
    touch = list(_params(_method(pool_cls, "touch"), "BlockPool.touch").values())
    groups = _touch_takes_groups(touch[0].annotation) if len(touch) == 1 else None
    if groups is None:
        shown = ", ".join(f"{p.name}: {p.annotation}" for p in touch)
        raise PoolAPIError(f"BlockPool.touch({shown}): cannot tell its argument's shape")
    block_hash = getattr(utils, "BlockHash", None)
    namedtuple = hasattr(block_hash, "_fields")
    if not namedtuple and getattr(block_hash, "__supertype__", None) is not bytes:
        raise PoolAPIError(f"BlockHash {block_hash!r} is neither a NamedTuple nor bytes")
    adaptations = [
        ADAPT_HASH_BLOCK_SIZE if "hash_block_size" in init else None,
        ADAPT_BLOCK_HASHES_ARG if "block_hashes" in cache else None,
        ADAPT_TOUCH_GROUPS if groups else None,
        ADAPT_HASH_NAMEDTUPLE if namedtuple else None,
    ]
    return PoolAPI(
        pool_cls=pool_cls,
        block_hash_type=block_hash,
        init_params=frozenset(init),
        cache_params=frozenset(cache),
        touch_groups=groups,
        hash_is_namedtuple=namedtuple,
        adaptations=tuple(a for a in adaptations if a),
    )
