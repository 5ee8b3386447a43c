"""``--db`` on every command (issue 22, item 5): the command's ``--db``, then ``engines --db``,
then ENGINES_DATABASE_URL, then the default; only commands that create data create a
SQLite file, any other pointed at a missing one says so in one line."""

from __future__ import annotations

from pathlib import Path

from benchmarks import shipped_path
from cli import main as cli


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _urls(tmp_path: Path) -> dict[str, str]:
    return {k: f"sqlite:///{tmp_path / (k + '.db')}" for k in ("env", "glob", "cmd")}


def test_db_precedence_command_then_global_then_env_then_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    u = _urls(tmp_path)
    monkeypatch.delenv("ENGINES_DATABASE_URL", raising=False)
    code, _, err = _run(capsys, "db", "upgrade")
    assert code == 0 and "sqlite:///cache.db" in err and (tmp_path / "cache.db").is_file()
    monkeypatch.setenv("ENGINES_DATABASE_URL", u["env"])
    for argv, want in (
        (["db", "upgrade"], "env"),
        (["--db", u["glob"], "db", "upgrade"], "glob"),
        (["--db", u["glob"], "db", "upgrade", "--db", u["cmd"]], "cmd"),
        (["db", "upgrade", "--db", u["cmd"]], "cmd"),
    ):
        code, _, err = _run(capsys, *argv)
        assert code == 0, err
        assert f"{want}.db" in err and all(f"{k}.db" not in err for k in u if k != want), (argv, err)
    # A command that reads: one benchmark loaded into cmd.db only, seen only through cmd.db.
    code, _, err = _run(capsys, "bench", "load", "--db", u["cmd"], str(shipped_path("MathlibMPR.json")))
    assert code == 0, err
    for argv, seen in (
        (["bench", "list"], False),
        (["bench", "list", "--db", u["cmd"]], True),
        (["--db", u["glob"], "bench", "list"], False),
        (["--db", u["glob"], "bench", "list", "--db", u["cmd"]], True),
        (["--db", u["cmd"], "bench", "list", "--db", u["glob"]], False),
        (["--db", u["cmd"], "bench", "list"], True),
    ):
        code, out, err = _run(capsys, *argv)
        assert code == 0, err
        assert ("mathlibmpr" in out) is seen, (argv, out)


READERS = [
    ["status"],
    ["score", "--bench", "mathlibqr"],
    ["corpus", "list"],
    ["bench", "list"],
    ["report", "--bench", "mathlibqr", "--out", "r"],
    ["plot", "--bench", "mathlibqr", "--out", "p.png"],
    ["drift", "leansearch", "--bench", "mathlibqr"],
    ["export", "--out", "x.warc.gz"],
    ["reparse"],
]


def test_a_reading_command_never_creates_a_database(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENGINES_DATABASE_URL", raising=False)
    # The default ./cache.db, then a --db naming a missing file.
    for argv in READERS:
        code, out, err = _run(capsys, *argv)
        assert code == 1 and out == "", argv
        assert err.splitlines() == [err.strip()] and err.startswith("error: no database at cache.db"), err
        assert "engines-demo" not in err
    # With the demo's database in the working directory, the line says where it is.
    (tmp_path / "engines-demo").mkdir()
    code, _, err = _run(capsys, "db", "upgrade", "--db", "sqlite:///engines-demo/cache.db")
    assert code == 0, err
    for argv in READERS:
        code, out, err = _run(capsys, *argv, "--db", f"sqlite:///{tmp_path / 'other.db'}")
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert f"no database at {tmp_path / 'other.db'}" in err
        name = " ".join(argv[:2]) if argv[0] in ("bench", "corpus") else argv[0]
        assert "./engines-demo/cache.db" in err and f"engines {name} --db sqlite:///engines-demo/cache.db" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engines-demo"]


def test_db_current_on_a_missing_file_says_so_and_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "db", "current", "--db", "sqlite:///gone.db")
    assert code == 0 and out.startswith("(none)") and "no database file at gone.db" in out
    assert not (tmp_path / "gone.db").exists()
