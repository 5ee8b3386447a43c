"""perf/crawl_throughput.py runs at a small size so it cannot rot (numbers are not asserted:
a loaded CI machine says nothing about speed; the report's shape and its checks are)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.postgres import PG_BASE_URL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
def test_crawl_throughput_small() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENGINES_PERF_PG_URL": PG_BASE_URL}
    proc = subprocess.run([sys.executable, str(ROOT / "perf" / "crawl_throughput.py"), "--queries", "24",
                           "--concurrency", "2", "--rate", "200"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "24 MathlibQR texts, concurrency 2" in out, out
    for label in ("bare httpx loop + JSON", "floor: parse + raw archive, SQLite", "engines crawl, SQLite",
                  "floor: parse + raw archive, PostgreSQL", "engines crawl, PostgreSQL, 1 worker",
                  "floor: PostgreSQL, 2 processes", "engines crawl, PostgreSQL, 2 workers"):
        assert re.search(re.escape(label) + r"\s+[0-9.]+\s+[0-9.]+x\s+[0-9.]+ ms\s+[0-9.]+/[0-9]+ cores", out), (
            label, out)
    assert re.search(r"2 PostgreSQL workers ÷ 1: [0-9.]+x", out), out
    assert re.search(r"floor, 2 PostgreSQL processes ÷ 1: [0-9.]+x", out), out
    assert re.search(r"engines crawl ÷ floor, sqlite: [0-9.]+x", out), out
    assert re.search(r"more PostgreSQL workers can reach at most [0-9.]+x one", out), out
    assert "server violations: 0 (must be 0)" in out, out
