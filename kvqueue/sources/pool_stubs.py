"""Stand-ins for the vLLM modules a release's ``block_pool.py`` imports, and the import
hook that answers ``vllm.*`` from them (docs/appendix-pool.md).

``block_pool.py`` imports ``vllm.logger``, ``vllm.distributed.kv_events``,
``vllm.v1.request``, ``vllm.multimodal.utils`` (0.31.0 on), ``vllm.v1.core.kv_cache_utils``
and ``vllm.v1.core.kv_cache_metrics`` (0.18.0 on). Importing the real ones pulls in torch
and most of vLLM, so each is answered here by our own code, written from what the pool
uses of it, never copied:

- ``vllm.logger.init_logger`` is :func:`logging.getLogger`, with a null handler: the gate
  calls ``reset_prefix_cache`` with blocks in use on purpose, and every such call logs a
  warning that would otherwise reach stderr through logging's last-resort handler.
- ``vllm.envs`` reads ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` as True, vLLM's default
  (False changes the event payloads of ``maybe_convert_block_hash``); any other setting
  is refused when read.
- ``vllm.distributed.kv_events``: every name is generated on import: a CamelCase name is a
  class that keeps its keyword arguments (``BlockStored(block_hashes=...)``), an
  UPPER_CASE name is the string of its name (``MEDIUM_GPU``, a default argument). The
  measured cases run with events off; the stand-ins only let a pool with events on run.
- ``vllm.v1.request.Request`` is a plain class: the pool names it only in annotations;
  the gate hands it request objects of its own (:class:`kvqueue.subjects.pool_api.PoolRequest`).
- ``vllm.v1.metrics.stats.KVCacheEvictionEvent`` (imported by ``kv_cache_metrics.py``) is
  a generated class like the events: built only by a pool given a metrics collector.
- ``vllm.multimodal.utils.get_mm_features_in_window`` is :class:`NotStoodIn`: called only
  for requests with multimodal features, which no request here has.
- ``vllm.utils.gc_utils.gc_untrack`` (0.34.0 on: the hash map's dict of block ids) is
  :func:`gc_untrack`, which returns its argument: the cyclic GC of CPython 3.10-3.13
  stops tracking a dict that holds only atomic keys and values by itself, which is all
  the release asks of it there (its own comment says the explicit call is for 3.14).
- ``vllm.v1.core.kv_cache_utils`` and ``kv_cache_metrics`` are the release's own code,
  loaded by :mod:`kvqueue.sources.pool_loader` and put into the table by it.

A name that nothing here answers is a :class:`NotStoodIn` placeholder when the release's
``kv_cache_utils.py`` imports it for use inside a function (it raises when used), and an
``ImportError`` naming it when ``block_pool.py`` imports it: a new import of the pool is
refused in one line, never answered by accident.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations

import builtins
import logging
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

#: The value ``vllm.envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` reads (vLLM's default).
INT_BLOCK_HASHES = True
#: Module that the stand-in classes and generated event classes say they come from.
_STUB_MODULE = "kvqueue.sources.pool_stubs"


class StandInUnavailable(RuntimeError):
    """A vLLM name that has no stand-in was used; the message names it (one line)."""


class NotStoodIn:
    """Placeholder for a vLLM name that nothing here answers: any use raises.

    Parameters
    ----------
    qualname
        The name as imported, e.g. ``"vllm.utils.hashing.xxhash"``.
    """

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def _refuse(self, how: str) -> StandInUnavailable:
        return StandInUnavailable(f"{self._qualname} has no stand-in here ({how})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("called")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._refuse(f"attribute {name} read")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        raise self._refuse("used as a base class")

    def __repr__(self) -> str:
        return f"<not stood in: {self._qualname}>"


class Request:
    """Stand-in for ``vllm.v1.request.Request``: only named in the pool's annotations."""


def init_logger(name: str) -> logging.Logger:
    """Stand-in for ``vllm.logger.init_logger``: the standard logger, silenced.

    Parameters
    ----------
    name
        The module's ``__name__``.

    Returns
    -------
    logging.Logger
        ``logging.getLogger(name)`` with a null handler and no propagation.
    """
    logger = logging.getLogger(name)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def gc_untrack(obj: Any) -> Any:
    """Stand-in for ``vllm.utils.gc_utils.gc_untrack``: return ``obj`` unchanged.

    The release calls it on an empty dict that only ever holds bytes keys and int values;
    CPython up to 3.13 leaves such a dict untracked by the cyclic GC by itself
    (``gc.is_tracked({}) is False``), so nothing differs on the interpreters measured here.
    """
    return obj


def _event_class(name: str) -> type:
    """Generate a stand-in event class that keeps its arguments."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.__dict__.update(kwargs)

    def __repr__(self: Any) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "args")
        return f"{name}({fields})"

    return type(name, (), {"__init__": __init__, "__repr__": __repr__, "__module__": _STUB_MODULE})


class _GeneratedModule(types.ModuleType):
    """A module whose every public name is generated on first import (kv_events)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value: Any = name if name.isupper() else _event_class(name)
        setattr(self, name, value)
        return value


class _StrictModule(types.ModuleType):
    """A module that refuses, in one line, any name it was not given (``vllm.envs``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise StandInUnavailable(f"{self.__name__}.{name} has no stand-in here")


def stub_table() -> dict[str, types.ModuleType]:
    """Return a fresh table of stand-in modules, by their vLLM names.

    Returns
    -------
    dict
        ``{"vllm": ..., "vllm.envs": ..., ...}``; packages carry their submodules as
        attributes, so ``import vllm.envs`` and ``from vllm import envs`` both work. The
        loader adds ``vllm.v1.core.kv_cache_utils`` and ``vllm.v1.core.kv_cache_metrics``.
    """
    table: dict[str, types.ModuleType] = {}
    packages = ("vllm", "vllm.distributed", "vllm.v1", "vllm.v1.core", "vllm.v1.metrics")
    for name in (*packages, "vllm.multimodal", "vllm.utils"):
        table[name] = types.ModuleType(name)
    envs = _StrictModule("vllm.envs")
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = INT_BLOCK_HASHES  # type: ignore[attr-defined]
    table["vllm.envs"] = envs
    logger_mod = types.ModuleType("vllm.logger")
    logger_mod.init_logger = init_logger  # type: ignore[attr-defined]
    table["vllm.logger"] = logger_mod
    table["vllm.distributed.kv_events"] = _GeneratedModule("vllm.distributed.kv_events")
    request_mod = types.ModuleType("vllm.v1.request")
    request_mod.Request = Request  # type: ignore[attr-defined]
    table["vllm.v1.request"] = request_mod
    mm_utils = types.ModuleType("vllm.multimodal.utils")
    mm_utils.get_mm_features_in_window = NotStoodIn(  # type: ignore[attr-defined]
        "vllm.multimodal.utils.get_mm_features_in_window"
    )
    table["vllm.multimodal.utils"] = mm_utils
    gc_utils = types.ModuleType("vllm.utils.gc_utils")
    gc_utils.gc_untrack = gc_untrack  # type: ignore[attr-defined]
    table["vllm.utils.gc_utils"] = gc_utils
    stats = types.ModuleType("vllm.v1.metrics.stats")
    stats.KVCacheEvictionEvent = _event_class("KVCacheEvictionEvent")  # type: ignore[attr-defined]
    table["vllm.v1.metrics.stats"] = stats
    link_packages(table)
    return table


def link_packages(table: Mapping[str, types.ModuleType]) -> None:
    """Set each module of ``table`` as an attribute of its parent package in the table."""
    for name, module in table.items():
        parent, _, child = name.rpartition(".")
        if parent in table:
            setattr(table[parent], child, module)


def lookup(table: Mapping[str, types.ModuleType], module: str, name: str) -> Any:
    """Return ``module.name`` from the table, or a :class:`NotStoodIn` placeholder.

    For the names the release's ``kv_cache_utils.py`` imports from vLLM: a stand-in when
    there is one, else a placeholder that raises only if used.
    """
    mod = table.get(module)
    if mod is not None:
        try:
            return getattr(mod, name)
        except (AttributeError, StandInUnavailable):
            pass
    return NotStoodIn(f"{module}.{name}")


def importer(table: Mapping[str, types.ModuleType]) -> Callable[..., Any]:
    """Return an ``__import__`` that answers ``vllm.*`` from ``table`` alone.

    Anything else must be the standard library: a release's code that imports a third
    party package (torch, numpy, ...) is refused with an ``ImportError`` naming it, so no
    such import ever runs here.

    Parameters
    ----------
    table
        The stand-in modules (:func:`stub_table` plus the release's own modules).

    Returns
    -------
    callable
        To put in a module's ``__builtins__`` as ``__import__``.
    """
    real_import = builtins.__import__

    def stand_in_import(
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        top = name.split(".")[0]
        if level != 0:
            raise ImportError(f"relative import of '{name}' (level {level}) has no stand-in")
        if top == "vllm":
            module = table.get(name)
            if module is None:
                raise ImportError(f"module {name} has no stand-in")
            for wanted in fromlist or ():
                try:
                    getattr(module, wanted)
                except (AttributeError, StandInUnavailable):
                    raise ImportError(f"{name}.{wanted} has no stand-in") from None
            return module if fromlist else table["vllm"]
        if top not in sys.stdlib_module_names:
            raise ImportError(f"'{name}' is not the standard library and has no stand-in")
        return real_import(name, globals, locals, fromlist or (), level)

    return stand_in_import


def builtins_with(import_fn: Callable[..., Any]) -> dict[str, Any]:
    """Return a copy of the builtins whose ``__import__`` is ``import_fn``."""
    return {**builtins.__dict__, "__import__": import_fn}
