"""The archive: what was sent and received, kept for good, and what is read back from it."""
