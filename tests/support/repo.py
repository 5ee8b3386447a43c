"""The repository's tracked files (git ls-files), for tests that read the whole house."""

from __future__ import annotations

import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The repository's files: ``git ls-files`` (with files added but not yet committed), or
    every file under ``root`` but .git when this is not a git checkout (an unpacked sdist)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, check=True).stdout
        names = [n for n in out.decode("utf-8").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [root / n for n in names if (root / n).is_file()]
