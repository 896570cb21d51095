"""The allocation-policy question: policies, the churn workload, invariant checks, runs,
analysis and report.
"""
