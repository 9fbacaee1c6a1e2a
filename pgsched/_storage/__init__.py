"""Storage: the one place that runs SQL, split by subject (``claims``, ``leases``, ``jobs``,
``ledger``, ``schema``, ``operator``, ``session``, ``schedules``, ``tasks``, ``skips``,
``dashboard``), each a class of the statements of its subject over ``statements``: the named
statements of ``sql/queries.sql`` (``pgsched/sql/`` once installed), one catalog per schema,
run with values as parameters and the schema as an identifier by the helper of each one's
cardinality. ``store.Store`` is every subject in one object. ``connection`` builds every
connection's settings and says what a database error means; ``servers`` knows which server
pgsched writes to across a failover.
"""
