"""The perf/ scripts of issue 13 run at a small size, so they cannot rot.

Each runs as a real subprocess (as a person would run it) on both backends where it
measures both; the numbers are not asserted (a loaded CI machine says nothing about
speed), the shape of the report and the scripts' own correctness checks are.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_BASE_URL

ROOT = Path(__file__).resolve().parent.parent


def run_script(name: str, *args: str, timeout: float = 180) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENGINES_PERF_PG_URL": PG_BASE_URL}
    proc = subprocess.run([sys.executable, str(ROOT / "perf" / name), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def ratios(text: str, label: str) -> list[float]:
    return [float(x) for x in re.findall(re.escape(label) + r"\s*([0-9.]+)x", text)]


@pytest.mark.postgres
def test_write_hits_small() -> None:
    out = run_script("write_hits.py", "--answers", "60", "--hits", "20", "--backend", "both")
    assert "sqlite: 60 answers × 20 hits = 1,200 hits" in out
    assert "postgresql: 60 answers × 20 hits = 1,200 hits" in out
    assert len(re.findall(r"add_answers\s+[0-9,]+ hits/s\s+[0-9.]+x old", out)) == 2, out


@pytest.mark.postgres
def test_corpus_load_small() -> None:
    out = run_script("corpus_load.py", "--rows", "1500", "--repeat", "1", "--backend", "both")
    assert out.count("1,500 rows (1,500 real + 0 synthetic)") == 2, out
    assert len(ratios(out, "load / parse time:")) == 2, out


def test_score_scale_small() -> None:
    out = run_script("score_scale.py", "--queries", "60", "--systems", "2", "--hits", "20", "--skip-ranx")
    assert "small: 2 systems × 6 queries × 20 hits = 240 hit rows" in out
    assert "large: 2 systems × 60 queries × 20 hits = 2,400 hit rows" in out
    assert len(ratios(out, "wall ratio large/small:")) == 2, out
    assert re.search(r"peak RSS of any score: [0-9,]+ MiB", out), out
