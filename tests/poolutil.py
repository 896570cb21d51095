"""Helpers of the pool tests: a fixture pool folder made of our own code only.

``tests/pools/block_pool.py`` and ``tests/pools/kv_cache_utils.py`` are written for the
tests (no vLLM text); the queue appended to the latter is the hand-written fixture
queue of ``tests/queues/good.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
POOL_DIR = TESTS_DIR / "pools"
GOOD_QUEUE = TESTS_DIR / "queues" / "good.py"


def queue_text(class_name: str = "FreeKVCacheBlockQueue") -> str:
    """The text of one class of ``tests/queues/good.py``, renamed FreeKVCacheBlockQueue."""
    text = GOOD_QUEUE.read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            lines = text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno]
            body = "".join(lines)
            return body.replace(f"class {class_name}", "class FreeKVCacheBlockQueue", 1)
    raise LookupError(class_name)


def write_fixture_pool(
    folder: Path, pool_text: str | None = None, queue_class: str = "FreeKVCacheBlockQueue"
) -> Path:
    """Write a pool source folder (block_pool.py + kv_cache_utils.py); return block_pool.py.

    Parameters
    ----------
    folder
        Where to write (created).
    pool_text
        Another ``block_pool.py`` text (default: ``tests/pools/block_pool.py``).
    queue_class
        Which class of ``tests/queues/good.py`` serves as the queue.
    """
    folder.mkdir(parents=True, exist_ok=True)
    pool = folder / "block_pool.py"
    pool.write_text(pool_text or (POOL_DIR / "block_pool.py").read_text(encoding="utf-8"))
    utils = (POOL_DIR / "kv_cache_utils.py").read_text(encoding="utf-8")
    (folder / "kv_cache_utils.py").write_text(utils + "\n\n" + queue_text(queue_class))
    return pool
