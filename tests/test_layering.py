"""The house: imports point down the data flow, no circles, no private name shared, rooms of bounded size.

benchmarks < store < engines < archive (parse path, bundles, run files) < crawler (what
is due, pacing, fetching, leases, writing) < scoring < pipelines (demo, publish, verify)
< cli. See tests/support/layering.py and the README's Layout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support import layering

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


def test_no_private_name_crosses_a_module():
    assert layering.private_imports(ROOT) == []


def test_a_planted_private_name_is_caught(tmp_path):
    root = _scratch(tmp_path)
    (root / "scoring" / "zz.py").write_text(
        "from scoring.resolve import chunked\n\n\ndef f():\n    from archive.reparse import _pending_ids\n"
        "    return _pending_ids\n")
    (root / "crawler" / "zz.py").write_text("from store import db as dbmod\n\nX = dbmod._SQLITE_FILES\n")
    found = layering.private_imports(root)
    assert len(found) == 2, found
    assert "scoring.zz imports archive.reparse._pending_ids" in found[0] + found[1]
    assert "crawler.zz uses store.db._SQLITE_FILES" in found[0] + found[1]


def test_a_planted_relative_upward_import_is_caught(tmp_path):
    root = _scratch(tmp_path)
    (root / "engines" / "zz.py").write_text("def g():\n    from ..crawler import plan\n    return plan\n")
    assert any("engines.zz imports crawler" in line for line in layering.upward_imports(root))


# Rooms allowed past the limits, each named with its one job in the README's Layout.
LONG_FILE_EXCEPTIONS: dict[str, str] = {}
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {}


def test_no_file_over_500_lines():
    over = [(p, n) for p, n in layering.long_files(ROOT) if p not in LONG_FILE_EXCEPTIONS]
    assert over == []


def test_no_function_body_over_80_lines():
    over = [(p, n) for p, n in layering.function_lengths(ROOT)
            if n > layering.MAX_FUNCTION_LINES and p.split(":")[0] + ":" + p.split(" ")[-1] not in LONG_FUNCTION_EXCEPTIONS]
    assert over == []


def test_the_exceptions_are_named_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    for path in list(LONG_FILE_EXCEPTIONS) + [k.split(":")[0] for k in LONG_FUNCTION_EXCEPTIONS]:
        assert path in layout, f"{path} is allowed past the size limits but not named in README Layout"


def test_function_lengths_count_nested_functions_on_their_own(tmp_path):
    (tmp_path / "store").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(70))
    inner = "\n".join(f"        y{i} = {i}" for i in range(70))
    (tmp_path / "store" / "m.py").write_text(
        f"def outer(a,\n          b):\n    '''doc'''\n{body}\n    def inner():\n{inner}\n        return 1\n    return inner\n")
    got = dict((p.split(" ")[-1], n) for p, n in layering.function_lengths(tmp_path))
    assert got == {"outer": 72, "inner": 71}
