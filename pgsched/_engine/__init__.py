"""The engine of one replica: where a scope is first seen (``sighting``), a plan claimed
(``claims``), held (``leases``), run (``execution``, ``transaction``), finished
(``outcomes``, ``writer``) and recorded (``recorder``), driven tick by tick by ``runtime``.
Its value types are in ``values``. It never imports the operations core, nor the core the
engine.
"""
