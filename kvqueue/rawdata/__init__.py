"""Reading the raw run folders: one reader for every kind of run, their integrity
checks and the ledger of what each folder is used for."""
