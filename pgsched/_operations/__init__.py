"""The operations core: every operator action once (``core``: status, runs, trigger, cancel,
pause, resume, backfill, prune, migrate; ``schedules``: the stored schedules of dynamic jobs),
with its validation, over connections from ``connectors``. ``Admin``, ``AsyncAdmin``, the
HTTP API and the command line are facades over it. It never imports the engine.
"""
