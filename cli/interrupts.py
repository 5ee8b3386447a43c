"""A Ctrl-C that Python would drop is delivered again.

The garbage collector can run a finalizer or a weakref callback (SQLAlchemy registers
some) at almost any allocation. A ``KeyboardInterrupt`` raised while one runs cannot
propagate: Python prints "Exception ignored in ..." and the command goes on as if the key
had not been pressed (seen as ``engines demo`` finishing with exit 0 after a Ctrl-C).
:func:`watch` replaces that printout for ``KeyboardInterrupt``: a helper thread hands the
interrupt back to the main thread a moment later (``_thread.interrupt_main``), where the
installed SIGINT handler runs as for a real Ctrl-C (the default one raises
``KeyboardInterrupt``; ``asyncio.run``'s cancels the crawl). Every other unraisable
exception goes to the hook that was there before.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

REDELIVER_AFTER = 0.01  # seconds: long enough for the finalizer to have returned


def _redeliver() -> None:
    time.sleep(REDELIVER_AFTER)
    _thread.interrupt_main(signal.SIGINT)


class _Hook:
    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Thread(target=_redeliver, name="redeliver-ctrl-c", daemon=True).start()
            return
        self.previous(unraisable)


def watch() -> None:
    """Install the hook (once; idempotent)."""
    if not isinstance(sys.unraisablehook, _Hook):
        sys.unraisablehook = _Hook(sys.unraisablehook)


def unwatch() -> None:
    """Put back the hook :func:`watch` replaced."""
    if isinstance(sys.unraisablehook, _Hook):
        sys.unraisablehook = sys.unraisablehook.previous


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that what the command cleans up on
    its way out (a ``.part`` file, a temporary directory) goes on ``kill`` too; the previous
    handler is put back afterwards. Outside the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
