"""Storage: the one place that runs SQL. ``store`` loads the named statements of
``sql/queries.sql`` and the migrations (``pgsched/sql/`` once installed), with values as
parameters and the schema as an identifier; ``connection`` builds every connection's
settings and says what a database error means; ``servers`` knows which server pgsched writes
to across a failover.
"""
