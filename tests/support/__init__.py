"""What the tiers share: a private PostgreSQL (``postgres``), ``pgsched run`` subprocesses
(``replica``), a fault-injecting TCP proxy (``proxy``), rows of the tests' schema (``rows``),
schedulers run in threads (``threads``), the CLI in this process (``cli``), the database roles
of ``sql/roles.sql`` (``roles``), HTTP without proxies (``net``) and waiting with a deadline
(``waiting``).

Not a tier: it holds no tests (``tests/conftest.py`` refuses a test collected outside a tier's
folder), and it never mocks the database.
"""
