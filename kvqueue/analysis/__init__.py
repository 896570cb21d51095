"""Raw runs to processed tables: strict reading, statistics, intervals and their measured
coverage. Imports nothing that measures.
"""
