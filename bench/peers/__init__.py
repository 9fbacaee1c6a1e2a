"""One module per scheduler under test; each runs as a replica process."""
