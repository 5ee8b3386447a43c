"""A real size-limited tmpfs (CI runs as root) for the machine-failure tests."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(size: str):
    """A real size-limited file system (skipped only where mount is impossible)."""
    d = Path("/tmp") / f"engines-tmpfs-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True)
    if res.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
        d.rmdir()
