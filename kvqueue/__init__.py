"""kvqueue-bench: a paired, order-randomized A/B benchmark of vLLM's free-block queue.

Everything that runs under the MEASURED interpreter — the command line up to the
notebook (``__main__``, ``params``, ``errors``, ``schema``, ``hostinfo``), the gate
(``validate``), the variant loader and release fetch (``loader``, ``upstream``), the
runner and its run files (``runner``, ``runfiles``), the worker and its cases (``worker``,
``cases``, ``fast``, ``block``) — uses only the standard library, so it runs under any
CPython >= 3.10 with nothing installed there (``tests/test_bare_interpreter.py``). The
notebook launcher, the quick A/B loop and the report (``notebook_run``, ``quick``,
``rawdata``, ``analysis``, ``processed``, ``stats``, ``coverage``, ``tables``, ``figures``,
``prose``, ``sections``, ``report_html``, ``writeup``, ``render``) need the project's
virtual environment. The module map: ``docs/design.md`` §8.
"""

import sys

# Before anything else: older interpreters fail inside the package with a traceback.
if sys.version_info < (3, 10):  # noqa: UP036 - runs under interpreters older than ours
    raise SystemExit(
        "kvqueue needs Python 3.10 or newer; " + sys.executable + " is " + sys.version.split()[0]
    )

__version__ = "0.1.0"
