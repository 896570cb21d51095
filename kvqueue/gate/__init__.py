"""The validation gate: a variant is timed only if it behaves as the baseline (standard
library only).

``gate`` runs the three parts for every variant: ``model_check`` (the model check on
small queues), ``invalid_ops`` (invalid operations compared with a reference) and
``size_check`` (the model check at every timed queue size); ``naming`` holds what they
share (block names, the queue's ends, ``ValidationError``).
"""
