"""Parameters of every command: their defaults, their help, how their text is read and
the checks that refuse bad values without starting a process.

The one source that the CLI options, the ``KVQUEUE_<NAME>`` environment each command
reads, the Makefile's variables of each target and the notebooks' ``parameters`` cells
are generated from: :mod:`~kvqueue.params.spec` (how a parameter is declared, read and
written), :mod:`~kvqueue.params.value_checks` (the value checks every command shares), one
module per command's parameters (:mod:`~kvqueue.params.bench_params`,
:mod:`~kvqueue.params.history_params`, :mod:`~kvqueue.params.policy_params`,
:mod:`~kvqueue.params.report_params`, :mod:`~kvqueue.params.check_queue_params`),
:mod:`~kvqueue.params.command_params` (what each command reads) and
:mod:`~kvqueue.params.make_vars` (the Make text the Makefile includes).

Standard library only, and nothing from a folder of the package: ``python -m kvqueue``
imports these under a bare interpreter, and the report reads them without the bench.
"""
