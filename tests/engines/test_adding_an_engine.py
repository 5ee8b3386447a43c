"""An engine is declared once (issue 32): adding one as docs/adding-an-engine.md says
touches its adapter, its stand-in and the registry line, and the CLI crawls it.

The toy engine is built from the page's own code blocks in a temporary copy of
``engines/`` (put first on ``PYTHONPATH``), served by ``engines emulate toy`` and crawled
by ``engines crawl toy`` into a real SQLite database, as a contributor would.
"""

from __future__ import annotations

import ast
import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-an-engine.md"
BLOCK = re.compile(r"```python\n# file: (\S+)( \(add\))?\n(.*?)```", re.S)
PRODUCT = ("benchmarks", "store", "engines", "archive", "crawler", "scoring", "pipelines", "cli")


def _files(top: Path) -> dict[str, Path]:
    return {str(p.relative_to(top)): p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _build_toy(tmp: Path) -> Path:
    """``engines/`` copied to ``tmp`` with the page's three changes applied; returns ``tmp``."""
    shutil.copytree(ROOT / "engines", tmp / "engines", ignore=shutil.ignore_patterns("__pycache__"))
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert [(path, bool(add)) for path, add, _ in blocks] == [
        ("engines/toy.py", False), ("engines/emulate/toy.py", False), ("engines/registry.py", True)]
    for path, add, code in blocks:
        target = tmp / path
        if not add:
            target.write_text(code, encoding="utf-8")
            continue
        imports, lines = [], []
        for line in code.strip().splitlines():
            (imports if line.startswith("from ") else lines).append(line)
        src = target.read_text(encoding="utf-8").splitlines()
        last_import = max(i for i, s in enumerate(src) if s.startswith("from engines."))
        src[last_import + 1:last_import + 1] = imports
        last_register = max(i for i, s in enumerate(src) if s.startswith("register("))
        src[last_register + 1:last_register + 1] = lines
        target.write_text("\n".join(src) + "\n", encoding="utf-8")
    return tmp


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)]), "ENGINES_CACHE_DIR": str(tmp / "cache")}


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True,
                          env=_env(tmp), cwd=tmp, timeout=300)


def test_the_page_touches_its_adapter_its_stand_in_and_the_registry_line_only(tmp_path):
    tmp = _build_toy(tmp_path)
    before, after = _files(ROOT / "engines"), _files(tmp / "engines")
    assert sorted(set(after) - set(before)) == ["emulate/toy.py", "toy.py"]
    assert set(before) <= set(after)
    changed = [p for p in before if not filecmp.cmp(before[p], after[p], shallow=False)]
    assert changed == ["registry.py"]
    old = (ROOT / "engines" / "registry.py").read_text(encoding="utf-8").splitlines()
    new = (tmp / "engines" / "registry.py").read_text(encoding="utf-8").splitlines()
    assert sorted(set(new) - set(old)) == ["from engines.toy import ToyAdapter", "register(ToyAdapter)"]
    assert len(new) == len(old) + 2


def test_the_toy_engine_is_crawled_through_the_cli_against_its_stand_in(tmp_path):
    tmp = _build_toy(tmp_path)
    helped = _cli(tmp, "crawl", "--help")
    assert helped.returncode == 0 and "toy" in helped.stdout  # the help derives from the registry
    db = f"sqlite:///{tmp / 'toy.db'}"
    texts = ["add comm", "prime dvd mul", "zzqx qqzw"]
    bench = tmp / "toy-bench.json"
    bench.write_text(json.dumps([{"id": f"toy-{i}", "full_name": "Nat.add_comm", "q1c_natural": t}
                                 for i, t in enumerate(texts)]), encoding="utf-8")
    loaded = _cli(tmp, "bench", "load", str(bench), "--name", "toybench", "--allow-modified", "--db", db)
    assert loaded.returncode == 0, loaded.stderr
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "emulate", "toy", "--rate", "none"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp), cwd=tmp)
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read() if server.poll() is not None else url
        crawled = _cli(tmp, "crawl", "toy", "--bench", "toybench", "--url", f"toy={url}", "--rate", "50/1s",
                       "--db", db)
        assert crawled.returncode == 0, crawled.stdout + crawled.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    engine = sa.create_engine(db)
    with engine.connect() as c:
        (cid, ident), = c.execute(sa.text("select id, params from engine_configs where engine = 'toy'")).all()
        assert json.loads(ident)["base_url"] == url  # a stand-in never shares rows with the public service
        hits = c.execute(sa.text("select a.query_text, h.rank, h.name from answers a join hits h on h.answer_id = a.id "
                                 "where a.config_id = :c order by a.query_text, h.rank"), {"c": cid}).all()
        answered = {t for (t,) in c.execute(sa.text("select query_text from answers where config_id = :c"), {"c": cid})}
    engine.dispose()
    assert answered == set(texts)  # the text matching nothing is an empty answer, not a failure
    by_text: dict[str, list[str]] = {}
    for text, rank, name in hits:
        by_text.setdefault(text, []).append(name)
    assert by_text["add comm"] and by_text["prime dvd mul"] and "zzqx qqzw" not in by_text
    assert [r for t, r, _ in hits if t == "add comm"] == list(range(1, 21))  # num_results 20, as declared


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_an_engine_not_in_the_demo_is_named_only_by_its_adapter_and_the_registry():
    named = sorted(str(p.relative_to(ROOT)) for pkg in PRODUCT if (ROOT / pkg).is_dir()
                   for p in (ROOT / pkg).rglob("*.py") if "leanstatesearch" in p.read_text(encoding="utf-8"))
    assert named == ["engines/leanstatesearch.py", "engines/registry.py"]
    # and the registry names it only through the import of its adapter
    assert not any("leanstatesearch" in s for s in _string_literals(ROOT / "engines" / "registry.py"))


def test_no_private_name_is_imported_across_modules_inside_engines():
    found = []
    for p in sorted((ROOT / "engines").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found += [f"{p.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__version__"]
    assert found == []
