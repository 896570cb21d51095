"""The subject measured: the stand-in block class, this project's queue and the timed cases
(standard library only).
"""
