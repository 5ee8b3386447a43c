"""Make the upgrade fixtures of one landed version: a database written by that version's own code.

    python tests/data/upgrades/make.py REVISION COMMIT [--pg-url URL] [--stranded-by COMMIT]

Run from a git clone of engines (the script checks COMMIT out into a temporary worktree and
runs *that* code, never today's). Into ``tests/data/upgrades/REVISION/`` it writes:

- ``sqlite.db.xz`` — the SQLite file of ``engines demo --targets 5 --no-dense`` (three
  stand-ins crawled through the crawler: exchanges, answers, hits; a BM25 run; stored gold
  positions) plus, where that version has ``engines run import``, an imported TREC run;
- ``postgres.sql.xz`` — the same commands against a PostgreSQL schema, dumped in plain SQL
  (``pg_dump --inserts --no-owner --no-privileges``; the schema is named ``engines_fixture``);
- ``score-sqlite.json.xz`` / ``score-postgres.json.xz`` — what that version's
  ``engines score --bench mathlibqr --subset demo-first-5 --json`` printed on each database:
  the figures an upgrade must keep;
- ``made.json`` — the commit, every command run, the date and the sha256 of each file.

``--stranded-by COMMIT`` also runs that commit's ``engines db upgrade`` on a copy of the
SQLite file and keeps what it leaves (``stranded-by-<short>.db.xz``, with the command's exit
code and stderr in made.json): the archive a broken upgrade stranded, for the healing test.

The tests (tests/test_upgrades.py) never run old code: a fresh clone has no history to run
it from. They read these files. To add the fixtures of a new landed schema head, run this
script with the landed commit and add the revision to PROVENANCE.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import lzma
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SCHEMA = "engines_fixture"
SCORE = ["score", "--bench", "mathlibqr", "--subset", "demo-first-5"]


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


class Old:
    """The code of one commit, run from its own worktree."""

    def __init__(self, commit: str, where: Path) -> None:
        self.commit = sh(["git", "-C", str(REPO), "rev-parse", commit]).stdout.strip()
        self.src = where / f"src-{self.commit[:8]}"
        sh(["git", "-C", str(REPO), "worktree", "add", "--detach", str(self.src), self.commit])
        pyproject = (self.src / "pyproject.toml").read_text(encoding="utf-8")
        m = re.search(r'^engines\s*=\s*"([\w.]+):(\w+)"', pyproject, re.M)
        self.module, self.func = m.group(1), m.group(2)
        self.commands: list[dict] = []

    def has(self, *sub: str) -> bool:
        res = self.run(*sub, "--help", check=False, record=False)
        return res.returncode == 0

    def run(self, *args: str, cwd: Path | None = None, check: bool = True, record: bool = True,
            db: str | None = None):
        code = (f"import sys; from {self.module} import {self.func} as m; "
                "sys.argv = ['engines', *sys.argv[1:]]; sys.exit(m())")
        env = {**os.environ, "PYTHONPATH": str(self.src), "ENGINES_CACHE_DIR": str((cwd or self.src) / ".cache")}
        env.pop("ENGINES_DATABASE_URL", None)
        if db is not None:  # every version reads it; not every version's commands take --db
            env["ENGINES_DATABASE_URL"] = db
        print("$ engines", " ".join(args), file=sys.stderr)
        res = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, text=True, capture_output=True)
        if record:
            self.commands.append({"argv": ["engines", *args], "exit": res.returncode,
                                  **({"ENGINES_DATABASE_URL": db} if db else {})})
        if check and res.returncode != 0:
            raise SystemExit(f"engines {' '.join(args)} exited {res.returncode}:\n{res.stderr[-3000:]}")
        return res

    def remove(self) -> None:
        sh(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.src)])


def trec_run(sqlite_file: Path, out: Path) -> None:
    """A run of somebody else's: BM25's top ten of each demo query, in reverse order."""
    con = sqlite3.connect(sqlite_file)
    rows = con.execute(
        "SELECT q.qid, h.name, h.rank FROM hits h JOIN answers a ON a.id = h.answer_id "
        "JOIN engine_configs c ON c.id = a.config_id JOIN queries q ON q.query_sha256 = a.query_sha256 "
        "JOIN benchmarks b ON b.id = q.benchmark_id "
        "WHERE c.engine = 'bm25' AND b.name = 'mathlibqr' AND h.rank <= 10 ORDER BY q.qid, h.rank").fetchall()
    con.close()
    lists: dict[str, list[str]] = {}
    for qid, name, _ in rows:
        lists.setdefault(qid, []).append(name)
    with out.open("w", encoding="utf-8") as fh:
        for qid, names in lists.items():
            for rank, name in enumerate(reversed(names), 1):
                fh.write(f"{qid} Q0 {name} {rank} {100 - rank} their-run\n")


def build(old: Old, work: Path, db: str | None, run_file: Path | None, importing: bool) -> Path:
    """The demo, an imported run where the version has one, and the score JSON; returns the JSON.

    With no ``run_file`` yet (SQLite, first), the run is made from this database's BM25 answers
    and written to ``run_file``'s default place, ``work/their-run.trec``."""
    work.mkdir(parents=True, exist_ok=True)
    demo = ["demo", "--targets", "5", "--no-dense", "--out", str(work / "demo")]
    old.run(*demo, *(["--db", db] if db else []), cwd=work)
    url = db or f"sqlite:///{work / 'demo' / 'cache.db'}"
    if importing:
        if run_file is None:
            run_file = work / "their-run.trec"
            trec_run(work / "demo" / "cache.db", run_file)
        old.run("run", "import", str(run_file), "--bench", "mathlibqr", "--name", "their-run",
                "--source", "tests/data/upgrades/make.py", cwd=work, db=url)
    js = work / "score.json"
    old.run(*SCORE, "--json", str(js), cwd=work, db=url)
    return js


def xz(src: Path, dst: Path) -> str:
    data = src.read_bytes()
    dst.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    return hashlib.sha256(dst.read_bytes()).hexdigest()


def pg_schema(url: str, sql: str) -> None:
    import sqlalchemy as sa

    eng = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.exec_driver_sql(sql)
    eng.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revision", help="the schema head of that version, e.g. 0002")
    ap.add_argument("commit", help="the landed commit whose code makes the fixture")
    ap.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--stranded-by", help="a commit whose `engines db upgrade` strands the SQLite file")
    args = ap.parse_args()
    out = HERE / args.revision
    out.mkdir(parents=True, exist_ok=True)
    made: dict = {"revision": args.revision, "made_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "python": sys.version.split()[0], "files": {}}
    with tempfile.TemporaryDirectory(prefix="engines-fixture-") as tmp:
        tmp_path = Path(tmp)
        old = Old(args.commit, tmp_path)
        made["commit"] = old.commit
        try:
            importing = old.has("run", "import")
            sq = tmp_path / "sqlite"
            js = build(old, sq, None, None, importing)
            run_file = sq / "their-run.trec" if importing else None
            if run_file is not None:
                shutil.copy(run_file, out / "their-run.trec")
                made["run_file"] = "their-run.trec (BM25's top ten per demo query, reversed: make.py trec_run)"
            db_file = sq / "demo" / "cache.db"
            con = sqlite3.connect(db_file)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
            made["files"]["sqlite.db.xz"] = xz(db_file, out / "sqlite.db.xz")
            made["files"]["score-sqlite.json.xz"] = xz(js, out / "score-sqlite.json.xz")
            if args.stranded_by:
                made["stranded"] = strand(args.stranded_by, db_file, tmp_path, out, made)
            # PostgreSQL: the same commands in a schema of their own, dumped in plain SQL.
            pg_schema(args.pg_url, f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE; CREATE SCHEMA "{SCHEMA}"')
            sep = "&" if "?" in args.pg_url else "?"
            url = f"{args.pg_url}{sep}options=-csearch_path%3D{SCHEMA}"
            js = build(old, tmp_path / "postgres", url, run_file, importing)
            plain = args.pg_url.replace("+psycopg", "")
            dump = sh(["pg_dump", "--dbname", plain, f"--schema={SCHEMA}", "--no-owner", "--no-privileges",
                       "--inserts"]).stdout
            (tmp_path / "dump.sql").write_text(dump, encoding="utf-8")
            made["files"]["postgres.sql.xz"] = xz(tmp_path / "dump.sql", out / "postgres.sql.xz")
            made["files"]["score-postgres.json.xz"] = xz(js, out / "score-postgres.json.xz")
            pg_schema(args.pg_url, f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
            made["commands"] = old.commands
        finally:
            old.remove()
    text = json.dumps(made, indent=2, ensure_ascii=False).replace(tmp, "$TMP")  # the machine's temp path, not ours
    (out / "made.json").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


def strand(commit: str, db_file: Path, tmp: Path, out: Path, made: dict) -> dict:
    """Run ``commit``'s ``engines db upgrade`` on a copy of the SQLite fixture and keep the result."""
    breaker = Old(commit, tmp / "stranding")
    try:
        copy = tmp / "stranded.db"
        shutil.copy(db_file, copy)
        res = breaker.run("db", "upgrade", "--db", f"sqlite:///{copy}", cwd=tmp, check=False)
        con = sqlite3.connect(copy)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        name = f"stranded-by-{breaker.commit[:7]}.db.xz"
        made["files"][name] = xz(copy, out / name)
        return {"commit": breaker.commit, "command": f"engines db upgrade --db sqlite:///{copy.name}",
                "exit": res.returncode, "stderr": res.stderr.strip()[-600:], "file": name}
    finally:
        breaker.remove()


if __name__ == "__main__":
    main()
