"""The errors that end a command with one line (``make bench: ...``).

Defined here, once, so that every module on the bench route (``__main__`` -> ``params``
-> ``notebook_run`` -> ``runner``) raises and catches the same classes without
importing each other back. Standard library only.
"""

from __future__ import annotations


class BenchInputError(ValueError):
    """Bad input to ``make bench``; the message is one line. Nothing was written."""


class MachineBusy(BenchInputError):
    """Another measurement holds the machine lock (:mod:`kvqueue.measure.machine_lock`):
    nothing was started. Bad input to most commands (exit 2); ``make regress`` gives it
    a status of its own (4: not counted), so that CI does not read it as a bad change."""


class GateRefused(RuntimeError):
    """The validation gate refused a variant; the message holds the gate's report.

    Nothing was timed and nothing was written. ``failure`` is the first refused
    variant's summary and the first line of its error, one line (empty when the gate
    did not run).
    """

    def __init__(self, message: str, failure: str = "") -> None:
        super().__init__(message)
        self.failure = failure


class BenchError(RuntimeError):
    """A worker process failed; the run folder is kept and marked ``failed``."""
