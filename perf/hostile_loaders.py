"""Hostile input for the loaders at the issue's full sizes (issue 31): each case runs
``engines`` in a child process under ``/usr/bin/time -v`` and prints exit code, wall
time, peak RSS and the first stderr line. tests/archive/test_hostile_loaders.py runs the same
cases at sizes that keep the suite fast.

    python perf/hostile_loaders.py [--root DIR] [--only NAME ...] [--timeout 300]

``--root``: the checkout whose code runs (default this one): run it once with an older
checkout to get the before figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "perf"))

from _scratch import scratch_url  # noqa: E402
from tests.support.hostile_files import deep_corpus_line, jsonl_benchmark, many_rows, one_endless_line  # noqa: E402


def engines(root: Path, url: str, args: list[str], timeout: float) -> tuple[str, float, int, str]:
    """(exit, wall s, peak RSS bytes, first stderr line) of ``engines --db URL ARGS``."""
    code = f"import sys\nfrom cli.main import app\nsys.argv = ['engines', '--db', {url!r}, *{args!r}]\napp()\n"
    env = {**os.environ, "PYTHONPATH": str(root), "ENGINES_NO_PROGRESS": "1"}
    t0 = time.monotonic()
    # Its own process group: on timeout the engines process goes too, not only /usr/bin/time.
    p = subprocess.Popen(["/usr/bin/time", "-v", sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=str(root), start_new_session=True)
    try:
        _, stderr = p.communicate(timeout=timeout)
        killed = ""
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, stderr = p.communicate()
        killed = f"(killed after {timeout:.0f} s)"
    wall = time.monotonic() - t0
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    rss = int(found.group(1)) * 1024 if found else -1
    status = re.search(r"Exit status: (\d+)", stderr)
    err = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("\t", "Command exited"))]
    code_s = "timeout" if killed else status.group(1) if status else str(p.returncode)
    return code_s, wall, rss, killed or (err[:1] or [""])[0][:150]


def setup_bench(root: Path, url: str, tmp: Path, queries: int = 3) -> None:
    engines(root, url, ["bench", "load", str(jsonl_benchmark(tmp / f"small{queries}.jsonl", queries)), "--name", "b"], 600)


def cases(tmp: Path) -> dict:
    """name → (backend, setup(root, url), args)."""
    def gold(n: int) -> Path:
        """A BEIR folder of one query judged with ``n`` corpus ids (a JSONL line that long is refused)."""
        p = tmp / f"gold{n}"
        (p / "qrels").mkdir(parents=True, exist_ok=True)
        (p / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "t"}) + "\n")
        (p / "qrels" / "test.tsv").write_text("".join(f"q\tN.n{i}\t1\n" for i in range(n)))
        return p

    def big_with_corpus(root: Path, url: str) -> None:
        engines(root, url, ["bench", "load", str(jsonl_benchmark(tmp / "big.jsonl", 200_000)), "--name", "big"], 900)
        c = tmp / "c.jsonl"  # every gold name: all 200,000 queries in scope
        c.write_text("".join(json.dumps({"name": ["Mathlib", f"Topic{q % 97}", f"lemma_{q}_0"]}) + "\n"
                             for q in range(200_000)))
        engines(root, url, ["corpus", "load", str(c), "--name", "c"], 120)

    surrogate = tmp / "surrogate.jsonl"
    surrogate.write_text(json.dumps({"qid": "q", "query": "lone \ud800", "gold": ["A"]}) + "\n")
    nul_run = tmp / "nul.trec"
    nul_run.write_text("q0 Q0 Nat.add\x00comm 1 1.0 t\n")
    beir = tmp / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    (tmp / "outside.jsonl").write_text(json.dumps({"_id": "q1", "text": "what"}) + "\n")
    if not (beir / "queries.jsonl").is_symlink():
        (beir / "queries.jsonl").symlink_to(tmp / "outside.jsonl")
    (beir / "qrels" / "test.tsv").write_text("q1\tA\t1\n")
    run = ["--bench", "b", "--name", "x"]

    def at_cap() -> Path:
        """10,000 queries x 200 distinct names: 2,000,000 ranked names, the most a run file holds."""
        p = tmp / "cap.trec"
        with open(p, "w", encoding="utf-8") as fh:
            for q in range(10_000):
                fh.write("".join(f"q{q} Q0 Mathlib.Topic{q % 97}.lemma_{q}_{r} {r} {300 - r} run\n" for r in range(1, 201)))
        return p

    def bench_10k(root: Path, url: str) -> None:
        setup_bench(root, url, tmp, 10_000)

    def small(root: Path, url: str) -> None:
        setup_bench(root, url, tmp)

    return {
        "run-3GB-line": ("sqlite", small, ["run", "import", str(one_endless_line(tmp / "line.gz", 3000)), *run]),
        "run-20M-lines": ("sqlite", small, ["run", "import", str(many_rows(tmp / "rows.gz", 20_000_000)), *run]),
        "run-2M-names-import": ("sqlite", bench_10k, ["run", "import", str(at_cap()), *run]),
        "bench-200k-sqlite": ("sqlite", None, ["bench", "load", str(jsonl_benchmark(tmp / "b200k.jsonl", 200_000)),
                                               "--name", "big"]),
        "bench-200k-postgresql": ("postgresql", None, ["bench", "load", str(tmp / "b200k.jsonl"), "--name", "big"]),
        "gold-20k": ("sqlite", None, ["bench", "load", str(gold(20_000)), "--name", "g"]),
        "gold-200k": ("sqlite", None, ["bench", "load", str(gold(200_000)), "--name", "g"]),
        "score-200k-no-answers": ("sqlite", big_with_corpus, ["score", "--bench", "big"]),
        "corpus-deep-100k": ("sqlite", None, ["corpus", "load", str(deep_corpus_line(tmp / "deep.jsonl", 100_000)),
                                              "--name", "deep"]),
        "bench-lone-surrogate": ("sqlite", None, ["bench", "load", str(surrogate), "--name", "s"]),
        "run-nul-name-postgresql": ("postgresql", small, ["run", "import", str(nul_run), *run]),
        "bench-symlink-out": ("sqlite", None, ["bench", "load", str(beir), "--name", "x"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, (backend, setup, args) in cases(tmp).items():
            if a.only and name not in a.only:
                continue
            with scratch_url(backend) as url:
                if setup is not None:
                    setup(a.root, url)
                code, wall, rss, line = engines(a.root, url, args, a.timeout)
            print(f"{name}: exit {code}, {wall:.1f} s, peak RSS {rss / 2**20:.0f} MiB | {line}", flush=True)


if __name__ == "__main__":
    main()
