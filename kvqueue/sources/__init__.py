"""Where variant sources come from: vLLM releases on the package index, files, git refs;
source text to classes (standard library only).

``fetch`` gets one release's ``kv_cache_utils.py`` (by range reads, ``wheel``, or the
whole wheel), from the wheel ``index`` picks on the package index, into the ``cache``
with its digest record; ``errors`` are its one-line failures. ``loader`` turns source
text into classes.
"""
