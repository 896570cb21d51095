"""The processed tables: the one format between the raw data and the report."""
