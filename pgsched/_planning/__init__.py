"""Planning: which plans a job or a stored schedule has, and which of them are due now. Pure:
no I/O, no SQL and no clock (the database's now is an argument), so all of it is unit-tested
without a database. Imported from above (job definitions, the engine, the operations core,
the facades), never the other way.
"""
