"""Ctrl-C (issue 22, item 8): every long command says on stderr what the interrupt left
behind and how to go on, and exits 130 — a real SIGINT to a real ``engines demo``
subprocess, and the same line from each long command when the interrupt lands inside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main as cli
from tests.support.interrupts import default_sigint

ROOT = Path(__file__).resolve().parents[2]


def test_sigint_during_the_demo_says_so_and_exits_130(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "demo", "--targets", "2", "--no-dense", "--out", str(tmp_path / "d")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )
    try:
        seen = []
        for line in proc.stderr:  # the demo is under way once it names its database
            seen.append(line)
            if line.strip().startswith("database "):
                break
        else:
            pytest.fail("the demo never named its database: " + "".join(seen))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and "run the same command again to resume" in last, err


# (argv, where the interrupt lands, words the line must carry)
LONG = [
    (["demo", "--out", "{d}/demo"], "cli.commands.demo.run_demo", "run the same command again to resume"),
    (["crawl", "leansearch", "--bench", "mathlibqr"], "crawler.crawl.run_crawl", "run the same command again to resume"),
    (["run", "bm25", "--bench", "mathlibqr"], "engines.local.runner.run_bm25", "run the same command again"),
    (["run", "dense", "--model", "m", "--bench", "mathlibqr"], "engines.local.runner.run_dense",
     "run the same command again"),
    (["import", "{d}/b.warc.gz"], "archive.bundle.import_bundle", "nothing was imported"),
    (["export", "--out", "{d}/b.warc.gz"], "archive.bundle.export_bundle", "no bundle was written"),
    (["reparse"], "archive.reparse.reparse", "run the same command again to resume"),
    (["corpus", "load", "{d}/c.jsonl", "--name", "c"], "cli.commands.core.load_corpus",
     "nothing of this corpus was written"),
    (["bench", "load", "--shipped"], "cli.commands.core.load_shipped", "run the same command again"),
    (["score", "--bench", "mathlibqr"], "scoring.results.score", "run the same command again"),
]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> bytes:
    from store.db import open_database

    path = tmp_path_factory.mktemp("interrupt") / "cache.db"
    open_database(f"sqlite:///{path}").dispose()
    return path.read_bytes()


@pytest.mark.parametrize("argv, target, words", LONG, ids=[" ".join(a[0][:2]) for a in LONG])
def test_each_long_command_says_what_an_interrupt_left(argv, target, words, migrated, tmp_path, monkeypatch, capsys):
    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINES_DATABASE_URL", f"sqlite:///{tmp_path / 'cache.db'}")
    (tmp_path / "cache.db").write_bytes(migrated)
    (tmp_path / "b.warc.gz").write_bytes(b"")
    (tmp_path / "c.jsonl").write_text("{}\n")
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(module + "." + name, interrupted)
    capsys.readouterr()
    code = cli.run([a.replace("{d}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 130
    assert err.strip().splitlines() == [err.strip()] and err.startswith("interrupted: ") and words in err, err
