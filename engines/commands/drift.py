"""``engines drift``: what changed between two epochs of a hosted engine."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
