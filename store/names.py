"""Declaration-name normalisation: the one rule for matching returned names to corpus rows.

``normalize_name`` maps what an engine returns to the corpus's dotted ``full_name``:
a list of components is joined with ``.``; surrounding whitespace is stripped;
``«»``-quoted components lose their guillemets; a leading ``_root_.`` is dropped.
"""

from __future__ import annotations

import re
from typing import Any

_GUILLEMET = re.compile(r"«([^»]*)»")


def normalize_name(name: Any) -> str | None:
    """Dotted, unquoted name, or None when nothing usable is there."""
    if (type(name) is str and name and not name[0].isspace() and not name[-1].isspace() and "«" not in name
            and not name.startswith("_root_.")):
        return name  # the usual case, already normal (what the rules below leave unchanged)
    if isinstance(name, (list, tuple)):
        if not all(isinstance(p, str) for p in name):
            return None
        name = ".".join(p.strip() for p in name)
    if not isinstance(name, str):
        return None
    s = name.strip()
    s = _GUILLEMET.sub(lambda m: m.group(1), s)
    while s.startswith("_root_."):
        s = s[len("_root_."):]
    s = s.strip()
    return s or None
