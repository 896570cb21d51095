"""Stand-ins for the vLLM modules nothing in a subject's release files answers, and the
placeholders that stand for every other name (docs/appendix-pool.md, appendix-manager.md).

:mod:`kvqueue.sources.module_graph` answers a ``vllm.*`` import with the release's own
file when the subject reads it; otherwise with a stand-in module from :func:`stub_table`,
our own code written from what the release uses of it, never copied:

- ``vllm.logger.init_logger`` is :func:`logging.getLogger`, with a null handler: the gate
  calls ``reset_prefix_cache`` with blocks in use on purpose, and every such call logs a
  warning that would otherwise reach stderr through logging's last-resort handler.
- ``vllm.envs`` reads ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` as True, vLLM's default
  (False changes the event payloads of ``maybe_convert_block_hash``); any other setting
  is a placeholder, refused when read for its value.
- ``vllm.distributed.kv_events``: every name is generated on import: a CamelCase name is a
  class that keeps its keyword arguments (``BlockStored(block_hashes=...)``), an
  UPPER_CASE name is the string of its name (``MEDIUM_GPU``, a default argument). The
  measured cases run with events off; the stand-ins only let a pool with events on run.
- ``typing_extensions.deprecated`` returns what it decorates unchanged.
- ``vllm.config.get_current_vllm_config_or_none`` returns None and
  ``vllm.platforms.current_platform.register_custom_kv_cache_specs`` does nothing: the
  KV-cache spec registry (0.25 on) calls them when it first fills, outside any engine.

Any other module (``torch``, ``vllm.config``, ``vllm.sampling_params``) is a
:class:`StubModule`, and any name a stand-in module lacks is a :class:`NotStoodIn`: it may
be named (an annotation, a default value, ``torch.Tensor | None``) or tested with
``isinstance`` (False: no object here is of a package never imported), and raises when
used (called, tested for truth, iterated, subclassed). Every use is recorded
(:func:`reached`): the gates refuse a variant whose run reached one, naming it, even when
the release's code caught the exception.

Standard library only (the gate and the workers run this under the measured interpreter).
"""

from __future__ import annotations

import logging
import types
from typing import Any

#: The value ``vllm.envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` reads (vLLM's default).
INT_BLOCK_HASHES = True
#: Module that the stand-in classes and generated event classes say they come from.
_STUB_MODULE = "kvqueue.sources.stand_ins"


class StandInUnavailable(RuntimeError):
    """A vLLM name that has no stand-in was used; the message names it (one line)."""


#: Every stub reached in this process, in order (:func:`reached`): a release's code may
#: catch the exception a stub raises, so the gate reads this record, not the exception.
_REACHED: list[str] = []


def reached() -> tuple[str, ...]:
    """The qualified names of the stubs used so far in this process, first use first."""
    return tuple(dict.fromkeys(_REACHED))


def clear_reached() -> None:
    """Forget the stubs reached so far (the gate clears it before each variant)."""
    _REACHED.clear()


class NotStoodIn:
    """Placeholder for a name that nothing here answers: defining code may *name* it, any
    use raises and is recorded (:func:`reached`).

    Reading an attribute gives another placeholder (``torch.Tensor`` in an annotation,
    evaluated when vLLM's code is executed, is only a name); so does ``X | None``. A call,
    an ``isinstance`` test, iteration, truth, or use as a base class is a use.

    Parameters
    ----------
    qualname
        The name as imported, e.g. ``"vllm.utils.hashing.xxhash"``.
    """

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def _refuse(self, how: str) -> StandInUnavailable:
        _REACHED.append(self._qualname)
        return StandInUnavailable(f"{self._qualname} has no stand-in here ({how})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("called")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return NotStoodIn(f"{self._qualname}.{name}")

    def __getitem__(self, key: Any) -> Any:
        return self  # a subscript in an annotation: ``npt.NDArray[np.int32]``

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__

    def __instancecheck__(self, obj: Any) -> bool:
        # Nothing here is an instance of a class of a package never imported (a prompt
        # is never a numpy array): False is the true answer, not a use.
        return False

    def __subclasscheck__(self, cls: Any) -> bool:
        return False

    def __iter__(self) -> Any:
        raise self._refuse("iterated")

    def __bool__(self) -> bool:
        raise self._refuse("tested for truth")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        raise self._refuse("used as a base class")

    def __repr__(self) -> str:
        return f"<not stood in: {self._qualname}>"


class StubModule(types.ModuleType):
    """A module nothing stands in for (``torch``, ``vllm.config``): every public name is a
    :class:`NotStoodIn` placeholder, created on first read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = NotStoodIn(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


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


def deprecated(message: str, /, **_: Any) -> Any:
    """Stand-in for ``typing_extensions.deprecated`` (a decorator ``request.py`` of 0.17
    applies when its class is defined): the object is returned unchanged, unmarked; the
    measured paths never call what it marks."""
    return lambda obj: obj


def no_current_config() -> None:
    """Stand-in for ``vllm.config.get_current_vllm_config_or_none`` (0.25 on): no engine
    configuration is current here, so the spec registry registers vLLM's own specs only."""
    return None


class Platform:
    """Stand-in for ``vllm.platforms.current_platform`` (0.25 on, read when the KV-cache
    spec registry first fills): a platform that registers no custom KV-cache specs."""

    def register_custom_kv_cache_specs(self, vllm_config: Any) -> None:
        """Register nothing: only vLLM's own specs are used here."""

    def __getattr__(self, name: str) -> Any:
        return NotStoodIn(f"vllm.platforms.current_platform.{name}")


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


def stub_table() -> dict[str, types.ModuleType]:
    """Return a fresh table of stand-in modules, by their vLLM names.

    Each is a :class:`StubModule`: the names below are stood in for, any other name it is
    asked for is a placeholder that raises when used (and is recorded).

    Returns
    -------
    dict
        ``{"vllm.envs": ..., "vllm.logger": ..., "vllm.distributed.kv_events": ...}``.
    """
    envs = StubModule("vllm.envs")
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = INT_BLOCK_HASHES  # type: ignore[attr-defined]
    logger_mod = StubModule("vllm.logger")
    logger_mod.init_logger = init_logger  # type: ignore[attr-defined]
    config = StubModule("vllm.config")
    config.get_current_vllm_config_or_none = no_current_config  # type: ignore[attr-defined]
    typing_extensions = StubModule("typing_extensions")
    typing_extensions.deprecated = deprecated  # type: ignore[attr-defined]
    platforms = StubModule("vllm.platforms")
    platforms.current_platform = Platform()  # type: ignore[attr-defined]
    return {
        "vllm.envs": envs,
        "vllm.logger": logger_mod,
        "vllm.config": config,
        "vllm.platforms": platforms,
        "typing_extensions": typing_extensions,
        "vllm.distributed.kv_events": _GeneratedModule("vllm.distributed.kv_events"),
    }
