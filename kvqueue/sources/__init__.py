"""Where variant sources come from: vLLM releases on the package index, files, git refs;
source text to classes (standard library only).

``release_fetch`` gets one release's ``kv_cache_utils.py`` (by range reads,
``wheel_ranges``, or the whole wheel), from the wheel ``package_index`` picks, into the
``release_cache`` with its digest record (paths: ``cache_paths``); ``fetch_errors`` are
its one-line failures; ``versions`` sorts release numbers. ``loader`` turns source text
into classes.
"""
