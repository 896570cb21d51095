"""Processed tables to the report: tables, figures, prose, sections, HTML and writeup.
Imports nothing that measures.
"""
