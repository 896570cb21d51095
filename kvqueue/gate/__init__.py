"""The validation gate: a variant is timed only if it behaves as the baseline (standard
library only).

``gate`` runs the three parts for every variant: ``model`` (the model check on small
queues), ``sizes`` (the model check at every timed queue size) and ``invalid`` (invalid
operations compared with a reference); ``naming`` holds what they share (block names, the
queue's ends, ``ValidationError``).
"""
