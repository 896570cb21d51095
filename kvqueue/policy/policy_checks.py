"""The checks of a policy run's input that need the policies: the window names against the
policy registry, the workload against the churn model, and (starting processes) the
interpreter and the variant; in between, the checks that need neither
(:func:`kvqueue.params.policy_params.check_fields` and
:func:`~kvqueue.params.policy_params.check_bounds`).

Standard library only: ``python -m kvqueue policy`` runs these under a bare interpreter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvqueue.errors import BenchInputError
from kvqueue.measure.interpreter_checks import check_python
from kvqueue.params import policy_params
from kvqueue.params.policy_params import PolicyParams
from kvqueue.policy import churn, policies, trace
from kvqueue.sources import loader


def check_values(p: PolicyParams) -> None:
    """Every check of a policy run that needs no process (one line, before anything is
    written): each field, the policy names, the workload, then the bounds that follow
    from it (so a workload the churn model refuses is named as such), a trace's header,
    and that a ``TRACE_OUT`` can be written without replacing a file.

    Raises
    ------
    BenchInputError
        On the first bad value.
    """
    policy_params.check_fields(p)
    for name in p.policies:
        try:
            policies.get(name)  # the check child and the workers resolve names the same way
        except KeyError as exc:
            raise BenchInputError(f"WINDOWS: {exc.args[0]}") from None
    problem = workload_of(p).problem()
    if problem:
        raise BenchInputError(f"workload: {problem}")
    policy_params.check_bounds(p)
    if p.trace:
        try:
            trace.read_header(p.trace)
        except trace.TraceError as exc:
            raise BenchInputError(f"TRACE: {exc}") from None
    if p.trace_out:
        problem = trace.out_problem(p.trace_out)
        if problem:
            raise BenchInputError(f"TRACE_OUT: {problem}")


def workload_of(p: PolicyParams) -> churn.Workload:
    """The churn workload of a run's parameters."""
    return churn.Workload(**p.workload())


def check(p: PolicyParams) -> tuple[PolicyParams, dict[str, Any]]:
    """Every check of a policy run: values, the interpreter (probed once), the variant.

    Returns
    -------
    tuple
        The parameters with ``python`` resolved, and the interpreter's identity.

    Raises
    ------
    BenchInputError
        On the first problem, before anything is written.
    """
    check_values(p)
    path, info = check_python(p.python)
    p = replace(p, python=path)
    try:
        (variant,) = loader.load_variants([p.variant])
    except loader.SourceError as exc:
        raise BenchInputError(f"variant '{p.variant}': {exc}") from None
    problem = policies.unsupported(variant)
    if problem:
        raise BenchInputError(f"variant '{p.variant}': {problem}")
    return p, info
