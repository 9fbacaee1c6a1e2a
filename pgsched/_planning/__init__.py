"""Planning: which plans a job or a stored schedule has, and which of them are due now. Pure:
no I/O, no SQL and no clock (the database's now is an argument), so all of it is unit-tested
without a database. Imported by the engine and the operations core, never the other way.
"""
