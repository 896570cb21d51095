"""kvqueue-bench: a paired, order-randomized A/B benchmark of vLLM's free-block queue.

One folder per stage (``subject``, ``sources``, ``gate``, ``bench``, ``analysis``,
``report``) and per question (``history``, ``policy``); the root holds what every part
shares (``schema``, ``errors``, ``hostinfo``, ``child``, ``versions``, ``formatting``,
``kernel``, ``params``). The measured side (``subject``, ``sources``, ``gate``, the
workers) uses only the standard library, so it runs under any CPython >= 3.10 with
nothing installed there; ``analysis`` and ``report`` need the project's virtual
environment and never import the measuring side. The module map and its rules:
``docs/design.md`` §8, checked by ``tests/test_architecture.py``.
"""

import sys

# Before anything else: older interpreters fail inside the package with a traceback.
if sys.version_info < (3, 10):  # noqa: UP036 - runs under interpreters older than ours
    raise SystemExit(
        "kvqueue needs Python 3.10 or newer; " + sys.executable + " is " + sys.version.split()[0]
    )

__version__ = "0.1.0"
