"""A Ctrl-C raised inside a finalizer is delivered again (cli.interrupts), not lost.

Python cannot propagate an exception out of a weakref callback or ``__del__``: it prints
"Exception ignored in ..." and goes on. A loaded full suite saw ``engines demo`` finish
with exit 0 after its SIGINT, the KeyboardInterrupt swallowed in SQLAlchemy's
``_collection_gced`` weakref callback. These tests raise it in a weakref callback on
purpose: without the hook nothing stops the loop; with it, KeyboardInterrupt arrives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from cli import interrupts
from tests.support.interrupts import default_sigint

ROOT = Path(__file__).resolve().parents[2]


class _Obj:
    pass


def _interrupt_in_a_weakref_callback() -> None:
    obj = _Obj()

    def callback(_ref: weakref.ref) -> None:
        raise KeyboardInterrupt

    ref = weakref.ref(obj, callback)
    del obj  # the callback runs now and its KeyboardInterrupt is "unraisable"
    assert ref() is None


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.005)


def test_an_interrupt_lost_in_a_finalizer_arrives_again() -> None:
    # Python's own SIGINT handler, as in any process started with SIGINT at its default (a
    # suite run as a background job has it ignored, and then nothing is delivered at all).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.watch()
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _interrupt_in_a_weakref_callback()
            _spin(30.0)
        assert time.monotonic() - t0 < 30.0
    finally:
        interrupts.unwatch()
        signal.signal(signal.SIGINT, previous)


def test_other_unraisable_exceptions_go_to_the_previous_hook() -> None:
    seen = []
    previous = sys.unraisablehook
    hook = seen.append  # one bound method object, compared by identity below
    sys.unraisablehook = hook
    try:
        interrupts.watch()
        interrupts.watch()  # idempotent: one hook, not a chain of two
        assert sys.unraisablehook.previous is hook

        obj = _Obj()
        ref = weakref.ref(obj, lambda _r: 1 / 0)
        del obj
        assert ref() is None and [u.exc_type for u in seen] == [ZeroDivisionError]
        interrupts.unwatch()
        assert sys.unraisablehook is hook
    finally:
        sys.unraisablehook = previous


_CHILD = textwrap.dedent("""
    import sys, time, weakref
    {install}
    class O: pass
    o = O()
    def cb(r): raise KeyboardInterrupt
    r = weakref.ref(o, cb)
    del o
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            time.sleep(0.005)
    except KeyboardInterrupt:
        print("interrupted"); sys.exit(130)
    print("ran on"); sys.exit(0)
""")


@pytest.mark.parametrize("install, expected", [
    ("", (0, "ran on")),  # what Python does on its own: the Ctrl-C is gone
    ("import cli.main; cli.main.watch_interrupts()", (130, "interrupted")),  # what `engines` installs
])
def test_in_a_process_of_its_own(install: str, expected: tuple[int, str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(install=install)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, preexec_fn=default_sigint)
    assert (proc.returncode, proc.stdout.strip()) == expected, proc.stderr[-2000:]
    assert ("Exception ignored" in proc.stderr) == (not install)  # no traceback noise once handled
