"""The ``engines.adapters`` entry-point group: a tiny adapter package, written into a
temporary path from docs/writing-an-adapter.md (the package and a hand-written
``.dist-info``), is listed by ``engines list``, served by ``engines emulate``, crawled,
re-parsed without a send, exported and imported — all through the CLI in subprocesses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "writing-an-adapter.md"
BLOCK = re.compile(r"```(?:python|ini)\n# file: (\S+)\n(.*?)```", re.S)


def _install(site: Path) -> None:
    files = dict(BLOCK.findall(PAGE.read_text(encoding="utf-8")))
    assert sorted(files) == ["toyplug-0.1.dist-info/entry_points.txt", "toyplug/__init__.py"]
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text, encoding="utf-8")
    (site / "toyplug-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n", encoding="utf-8")


def _env(tmp: Path, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "ENGINES_CACHE_DIR": str(tmp / "cache")}


def test_a_plugged_in_adapter_is_listed_crawled_reparsed_and_exported(tmp_path):
    site = tmp_path / "site"
    _install(site)
    env = _env(tmp_path, site)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout) if "name" in r}
    assert rows["plugtoy"]["origin"] == "toyplug" and rows["leansearch"]["origin"] == "built-in"
    assert rows["plugtoy"]["rate"] == "5/10s" and rows["plugtoy"]["parameters"]["num_results"] == 20
    assert "toyplug" in cli("list").stdout
    db = f"sqlite:///{tmp_path / 'p.db'}"
    texts = ["add comm", "prime dvd mul"]
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps([{"id": f"p-{i}", "full_name": "Nat.add_comm", "q1c_natural": t}
                                 for i, t in enumerate(texts)]), encoding="utf-8")
    assert cli("bench", "load", str(bench), "--name", "pb", "--allow-modified", "--db", db).returncode == 0
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "emulate", "plugtoy", "--rate", "none"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read() if server.poll() is not None else url
        bad = cli("crawl", "plugtoy", "--bench", "pb", "--url", f"plugtoy={url}", "--param", "plugtoy.nope=1", "--db", db)
        assert bad.returncode != 0 and "known: num_results, batch_size, timeout" in bad.stderr
        crawled = cli("crawl", "plugtoy", "--bench", "pb", "--url", f"plugtoy={url}", "--rate", "50/1s",
                      "--param", "plugtoy.num_results=7", "--db", db)
        assert crawled.returncode == 0, crawled.stdout + crawled.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)

    def hits() -> list[tuple]:
        engine = sa.create_engine(db)
        with engine.connect() as c:
            got = c.execute(sa.text("select a.query_text, h.rank, h.name from answers a join hits h on h.answer_id = a.id"
                                    " where not a.superseded order by a.query_text, h.rank")).all()
        engine.dispose()
        return [tuple(r) for r in got]

    before = hits()
    assert len(before) == 14 and {t for t, _, _ in before} == set(texts)  # --param num_results=7 reached it
    reparsed = cli("reparse", "plugtoy", "--db", db)  # the stand-in is gone: nothing can be sent
    assert reparsed.returncode == 0, reparsed.stderr
    assert hits() == before
    warc = tmp_path / "p.warc.gz"
    assert cli("export", "--out", str(warc), "--db", db).returncode == 0
    dst = f"sqlite:///{tmp_path / 'q.db'}"
    assert cli("bench", "load", str(bench), "--name", "pb", "--allow-modified", "--db", dst).returncode == 0
    imported = cli("import", str(warc), "--db", dst)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    engine = sa.create_engine(dst)
    with engine.connect() as c:
        n = c.execute(sa.text("select count(*) from hits h join answers a on a.id = h.answer_id "
                              "join engine_configs e on e.id = a.config_id where e.engine = 'plugtoy'")).scalar()
    engine.dispose()
    assert n == 14
