"""Parameters of every command: their defaults, their help, how their text is read and
the checks that refuse bad values without starting a process.

The one source that the CLI options, the Make variables and the notebooks' ``parameters``
cells are generated from (``tests/test_params.py`` checks that they agree):
:mod:`~kvqueue.params.spec` (how a parameter is declared, read and written),
:mod:`~kvqueue.params.checks` (the value checks every command shares), and one module per
command's parameters: :mod:`~kvqueue.params.bench`, :mod:`~kvqueue.params.history`,
:mod:`~kvqueue.params.policy` and :mod:`~kvqueue.params.report`.

Standard library only, and nothing from a folder of the package: ``python -m kvqueue``
imports these under a bare interpreter, and the report reads them without the bench.
"""
