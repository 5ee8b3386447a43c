"""Hostile input files for the loaders (issue 31) and a way to run ``engines`` on them in a
child process, measured: exit code, stderr lines, wall time, peak RSS.

Shared by the tests (small sizes) and perf/hostile_loaders.py (the issue's full sizes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gzip_repeat(block: bytes, times: int) -> bytes:
    """A valid gzip stream of ``block`` repeated ``times`` times, built in about the time
    the CRC takes: after a full flush deflate emits the same bytes for every further copy
    of the block (the window then holds the same bytes each time)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()
    crc = 0
    for _ in range(times):
        crc = zlib.crc32(block, crc)
    size = (len(block) * times) & 0xFFFFFFFF
    return first + again * (times - 1) + end[:-8] + crc.to_bytes(4, "little") + size.to_bytes(4, "little")


def one_endless_line(path: Path, mib: int) -> Path:
    """A .gz TREC file that inflates to one line of ``mib`` MiB (no newline at all)."""
    path.write_bytes(gzip_repeat(b"x" * (1 << 20), mib))
    return path


def many_rows(path: Path, rows: int, line: bytes = b"q0 Q0 Nat.add_comm 1 1.0 run\n") -> Path:
    """A .gz TREC file of ``rows`` copies of one line (blank lines with ``line=b"\\n"``)."""
    per = max(1, (1 << 20) // len(line))
    path.write_bytes(gzip_repeat(line * per, max(1, rows // per)))
    return path


def deep_corpus_line(path: Path, depth: int) -> Path:
    """A corpus JSONL file whose second line nests ``depth`` lists deep."""
    good = json.dumps({"name": ["Nat", "add_comm"], "kind": "theorem", "signature": "a + b = b + a"})
    path.write_text(good + "\n" + '{"name": ["A"], "type": ' + "[" * depth + "]" * depth + "}\n", "utf-8")
    return path


def jsonl_benchmark(path: Path, queries: int, gold_per_query: int = 1) -> Path:
    """A JSONL benchmark of ``queries`` queries, each with ``gold_per_query`` gold names."""
    with open(path, "w", encoding="utf-8") as fh:
        for q in range(queries):
            gold = [f"Mathlib.Topic{q % 97}.lemma_{q}_{g}" for g in range(gold_per_query)]
            fh.write(json.dumps({"qid": f"q{q}", "query": f"query number {q}", "gold": gold}) + "\n")
    return path


def engines_in_child(url: str, *args: str, timeout: float = 600) -> tuple[int, list[str], float, int]:
    """``engines --db URL ARGS`` in its own process: exit code, stderr lines, wall seconds,
    peak RSS in bytes (VmHWM: getrusage's ru_maxrss keeps the peak of the forked parent)."""
    code = ("import atexit, re, sys\n"
            "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
            "atexit.register(lambda: sys.stderr.write('MAXRSS %d\\n' % hwm()))\n"
            "from cli.main import app\n"
            f"sys.argv = ['engines', '--db', {url!r}, *{list(args)!r}]\n"
            "app()\n")
    env = {**os.environ, "ENGINES_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=str(ROOT))
    wall = time.monotonic() - t0
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("MAXRSS ")]
    rss = [int(ln.split()[1]) * 1024 for ln in p.stderr.splitlines() if ln.startswith("MAXRSS ")]
    return p.returncode, lines, wall, rss[0] if rss else -1
