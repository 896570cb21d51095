"""kvqueue-bench: a paired, order-randomized A/B benchmark of vLLM's free-block queue.

The modules that the timing worker and the validation gate import (``loader``,
``upstream``, ``validate``, ``worker``, ``cases``, ``fast``, ``block``, ``hostinfo``)
use only the standard library, so they run under any CPython >= 3.10 without
installing anything there. Analysis modules (``stats``, ``report``, ...) need the
project's virtual environment.
"""

__version__ = "0.1.0"
