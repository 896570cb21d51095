"""The subjects measured: this project's queue, the stand-in block class and the
timed cases of the queue."""
