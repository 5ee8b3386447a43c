"""A name is text, everywhere (issue 31): a run named with mathtext and terminal escapes is
imported, scored and plotted; every line shows it escaped (``\\x1b``), and the plot draws it
as written (matplotlib's mathtext broke the whole figure on ``$\\frac{$``)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app

DATA = Path(__file__).resolve().parents[1] / "data" / "byo"
NAME = "$\\frac{$ \x1b[2J\x1b]0;owned\x07 \u202eevil \x9b31m"
SHOWN = "$\\frac{$ \\x1b[2J\\x1b]0;owned\\x07 \\u202eevil \\x9b31m"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


def _run(url: str, *args: str):
    res = CliRunner().invoke(app, ["--db", url, *args])
    assert res.exit_code == 0, res.output
    for c in RAW:
        assert c not in res.stdout and c not in res.stderr, (args, res.output)
    return res


def test_hostile_run_name_is_shown_escaped_and_plotted(sqlite_url: str, tmp_path: Path) -> None:
    _run(sqlite_url, "corpus", "load", str(DATA / "corpus.jsonl"), "--name", "divisors", "--revision", "r1")
    _run(sqlite_url, "bench", "load", str(DATA / "beir"), "--name", "byo-divisors")
    res = _run(sqlite_url, "run", "import", str(DATA / "my-run.trec"), "--bench", "byo-divisors", "--name", NAME,
               "--source", "src \x1b[31m")
    assert f"imported run {SHOWN}" in res.stderr
    res = _run(sqlite_url, "score", "--bench", "byo-divisors", "--by", "style")
    assert SHOWN.split(" ")[0] in res.stdout and "\\x1b[2J" in res.stdout
    out = tmp_path / "fig.png"
    res = _run(sqlite_url, "plot", "--bench", "byo-divisors", "--out", str(out))
    assert out.stat().st_size > 1000
