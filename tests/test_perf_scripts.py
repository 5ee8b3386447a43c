"""The perf/ scripts of issue 13 run at a small size, so they cannot rot.

Each runs as a real subprocess (as a person would run it) on both backends where it
measures both; the numbers are not asserted (a loaded CI machine says nothing about
speed), the shape of the report and the scripts' own correctness checks are.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.postgres import PG_BASE_URL
from tests.support.repo import ROOT, tracked_files


def run_script(name: str, *args: str, timeout: float = 180, root: Path = ROOT) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), "ENGINES_PERF_PG_URL": PG_BASE_URL}
    proc = subprocess.run([sys.executable, str(root / "perf" / name), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=root)
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


def test_nothing_in_the_repository_points_outside_it() -> None:
    """Issue 22: nothing may read or cite the machine's shared folder beside the checkout
    (a fresh clone has none). Every tracked file is searched, code, docs and data alike."""
    # Spelt in pieces so that this file does not match itself; the last one is the perf
    # scripts' old spelling: the parent directory joined with the folder name.
    needles = [re.escape(b"../" + b"shared"), re.escape(b"/work/" + b"shared"), rb"parent\s*/\s*[\"']" + b"shared",
               rb"(?<![\w/.-])" + b"shared" + rb"/(?:data|docs)\b"]  # the folder named from its root
    hits = []
    for path in tracked_files():
        data = path.read_bytes()
        for needle in needles:
            for m in re.finditer(needle, data):
                line = data.count(b"\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {m.group().decode()}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)


def test_perf_defaults_run_from_a_copy_of_the_repository(tmp_path: Path) -> None:
    """The perf scripts' default inputs are inside the repository: a copy of its tracked
    files in a temp directory (no sibling folders) runs corpus_load.py's smallest mode."""
    copy = tmp_path / "engines"
    for path in tracked_files():
        dst = copy / path.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dst)
    out = run_script("corpus_load.py", "--rows", "300", "--repeat", "1", "--backend", "sqlite", root=copy)
    assert "sqlite: 300 rows (300 real + 0 synthetic)" in out, out
    assert len(ratios(out, "load / parse time:")) == 1, out
