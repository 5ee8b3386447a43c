"""engines: compare Lean 4 / Mathlib search engines reproducibly.

This package holds the remote engine adapters (one module per engine), the local
engines (``engines.local``), the registry, and the Typer CLI (``cli.main``).
"""

from __future__ import annotations

__version__ = "0.1.0"


def code_version() -> str:
    """Package version plus the git commit when running from a checkout."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{rev}" if rev else __version__
