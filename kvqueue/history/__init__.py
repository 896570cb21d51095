"""The release-history question: every distinct queue version of vLLM's releases, paired;
its analysis and report.
"""
