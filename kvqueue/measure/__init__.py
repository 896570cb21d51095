"""The measuring stage shared by every question: the worker processes (timed, or
counted under cachegrind), their sizing and the run folders they write."""
