"""The errors of fetching a release: one line each, one class per case.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured.
"""

from __future__ import annotations


class FetchError(RuntimeError):
    """A release could not be fetched or its cached file is not the release's.

    The message is one line. Subclasses tell the cases apart for callers that care.
    """


class ReleaseNotFound(FetchError):
    """The index was reached but lists no file of that release."""


class NoReadableWheel(FetchError):
    """The release exists but has no Linux wheel that can be read."""


class ModuleMissing(FetchError):
    """The release's files lack :data:`MEMBER`: the release predates the module."""


class IndexUnreachable(FetchError):
    """The index or the file host cannot be reached (and nothing usable is cached).

    ``detail`` is the location and reason alone, for callers that phrase their own line.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class CacheMismatch(FetchError):
    """The cached file differs from its digest record, or the record is unreadable."""
