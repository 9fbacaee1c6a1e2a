"""Job definitions: every option of ``@scheduler.job(...)`` checked into a ``JobSpec``, and the
registry of a scheduler's jobs."""
