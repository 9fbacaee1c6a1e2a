"""The operator facades over the operations core: the sync ``Admin`` (its methods generated),
the ``AsyncAdmin``, the HTTP API and dashboard."""
