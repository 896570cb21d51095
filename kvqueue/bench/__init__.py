"""The A/B bench stage: one run (lock, gate, worker processes, sizing, run folder) and make
quick.
"""
