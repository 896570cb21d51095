"""The methods study of the intervals (docs/appendix-statistics.md): runnable with
``python -m methods.coverage``, tested by tests/test_methods_study.py, never run by the
product."""
