"""Statistics shared by the questions: paired ratios, intervals, instruction
figures per operation. Pure functions, no I/O."""
