"""kvqueue-bench: a paired, order-randomized A/B benchmark of vLLM's free-block queue.

Shared stages: ``subjects`` (what is measured), ``sources`` (where variants come from),
``gate``, ``measure`` (worker processes and run folders, by time or by instructions),
``rawdata`` (reading the run folders), ``stats``, ``processed`` (the tables on disk),
``params`` and ``report`` (the framework and the build's orchestrator); one folder per
question: ``ab``, ``history``, ``policy``. The root holds what every part shares
(``schema``, ``errors``, ``hostinfo``, ``formatting``, ``kernel``, ``runrecord``). The
measured side (``subjects``, ``sources``, ``gate``, the workers) uses only the standard
library, so it runs under any CPython >= 3.10 with nothing installed there; the read
side needs the project's virtual environment and never imports ``measure`` or ``gate``.
The map: ``docs/design.md`` §8; the rules: ``tests/test_architecture.py``.
"""

import sys

# Before anything else: older interpreters fail inside the package with a traceback.
if sys.version_info < (3, 10):  # noqa: UP036 - runs under interpreters older than ours
    raise SystemExit(
        "kvqueue needs Python 3.10 or newer; " + sys.executable + " is " + sys.version.split()[0]
    )

__version__ = "0.1.0"
