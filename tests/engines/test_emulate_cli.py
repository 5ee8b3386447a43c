"""``engines emulate`` as a real process: it starts, prints its URL, answers, and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import httpx
import pytest

from engines.registry import get_adapter

TINY = [
    {"name": ["Nat", "add_comm"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"],
     "signature": "(n m : ℕ) : n + m = m + n", "docstring": "Addition is commutative."},
    {"name": ["Nat", "mul_comm"], "module_name": ["Mathlib", "Algebra", "Group", "Defs"],
     "signature": "(n m : ℕ) : n * m = m * n", "docstring": "Multiplication is commutative."},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "cli.main", "emulate", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


@pytest.mark.parametrize("engine", ["leansearch", "leanexplore", "leanstatesearch"])
def test_emulate_cli_serves_and_reports(engine, tmp_path):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in TINY), encoding="utf-8")
    port = free_port()
    proc = start([engine, "--port", str(port), "--corpus", str(corpus), "--rate", "2/60s", "--seed", "1"], tmp_path)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith(f"http://127.0.0.1:{port}"), proc.stderr.read() if proc.poll() is not None else url
        adapter = get_adapter(engine, base_url=url, num_results=5)
        with httpx.Client() as client:
            codes = []
            for _ in range(3):
                resp = client.send(adapter.build_request(["add comm"]))
                codes.append(resp.status_code)
                if resp.status_code == 200:
                    hits = adapter.parse(["add comm"], resp.status_code, resp.headers, resp.content)
                    assert [h.name for h in hits[0]] == ["Nat.add_comm", "Nat.mul_comm"]
        assert codes == [200, 200, 429]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "requests 3, served 2, requests over the limit: 1" in err


def test_emulate_cli_default_corpus_and_bad_input(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "cli.main", "emulate", "moogle"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert bad.returncode != 0 and bad.stderr.strip().startswith("error: unknown engine 'moogle'")
    assert len(bad.stderr.strip().splitlines()) == 1
    bad_rate = subprocess.run([sys.executable, "-m", "cli.main", "emulate", "loogle", "--rate", "fast"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert bad_rate.returncode != 0 and "invalid rate 'fast'" in bad_rate.stderr

    proc = start(["loogle", "--rate", "none", "--p-html", "1.0"], tmp_path)  # the bundled Mathlib slice, a free port
    try:
        url = proc.stdout.readline().strip()
        with httpx.Client() as client:
            page = client.get(f"{url}/json", params={"q": "ProbabilityTheory.cond"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert "faults: html_200 1" in err
