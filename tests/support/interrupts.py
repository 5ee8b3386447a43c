"""Interrupt helpers: run a child with the default SIGINT disposition."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default. A suite started as a background
    job of a non-interactive shell (``cmd &``) inherits SIGINT ignored, and Python then
    installs no handler for it: the demo would never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
