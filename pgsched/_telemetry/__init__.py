"""What pgsched tells about itself: Prometheus metrics and gauges, structured logs,
OpenTelemetry spans."""
