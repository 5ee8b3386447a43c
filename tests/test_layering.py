"""The house: imports point down the data flow, no circles, rooms of bounded size.

store < engines < crawler (crawl and archive) < scoring (scores, reports, publish,
verify, the demo pipeline) < cli. See tests/layering.py and the README's Layout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests import layering

ROOT = Path(__file__).resolve().parent.parent


def test_every_import_points_down_the_flow():
    assert layering.upward_imports(ROOT) == []


def test_no_circle_of_files_or_packages():
    assert layering.circles(ROOT) == []


def _scratch(tmp_path: Path) -> Path:
    for pkg in layering.PACKAGES:
        if (ROOT / pkg).is_dir():
            shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return tmp_path


def test_a_planted_lazy_upward_import_is_caught(tmp_path):
    root = _scratch(tmp_path)
    target = root / "store" / "db.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from scoring.results import score  # up\n    return score\n")
    found = layering.upward_imports(root)
    assert len(found) == 1 and "store.db imports scoring.results (up)" in found[0]


def test_a_planted_circle_is_caught(tmp_path):
    root = _scratch(tmp_path)
    (root / "store" / "zz_a.py").write_text("def f():\n    from store import zz_b\n    return zz_b\n")
    (root / "store" / "zz_b.py").write_text("from store.zz_a import f\n")
    assert ["store.zz_a", "store.zz_b"] in layering.circles(root)


def test_a_planted_relative_upward_import_is_caught(tmp_path):
    root = _scratch(tmp_path)
    (root / "engines" / "zz.py").write_text("def g():\n    from ..crawler import plan\n    return plan\n")
    assert any("engines.zz imports crawler" in line for line in layering.upward_imports(root))
