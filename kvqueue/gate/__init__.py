"""The validation gate: a variant is timed only if it behaves as the baseline (standard
library only).
"""
