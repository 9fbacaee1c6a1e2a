"""The replica's HTTP facade: ``server`` (metrics, probes, the JSON API), ``schedules`` (the
schedule endpoints) and ``page`` (the status page). Translates and calls the operations core;
validates nothing and never touches storage.
"""
