"""The ``pgsched`` command line, a facade: ``main`` (the parser and the job commands),
``schedules`` (``pgsched schedules ...``) and ``common`` (the Admin of the options, tables).
"""
