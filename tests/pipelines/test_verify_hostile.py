"""``engines verify`` and ``engines import`` against hostile bundles, round two (issue 31).

Every bundle here is the demo's leaderboard bundle (2 targets, no dense row) rewritten
record by record with warcio (lengths and digests recomputed, so the WARC stays valid), or
cut short. Each case runs ``engines`` as a process and is measured: exit code, one line on
stderr, wall time, peak memory (``os.wait4``), and, where temporary space is the point,
the bytes it left or reached in its temporary directory.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

# The end record's format, spelled out (archive.bundle.records reads it; archive.bundle.export writes it).
END_URI = "urn:engines:end"
H_END = "WARC-Engines-End"
H_RECORDS = "WARC-Engines-Records"
ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


# ------------------------------------------------------------------ running engines, measured


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float
    rss: int  # peak resident bytes of the process
    peak_temp: int = 0  # most bytes seen under its TMPDIR


def _du(d: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _child_hwm(pid: int) -> int:
    """The child's peak resident bytes (VmHWM), once it runs its own program: getrusage's
    ru_maxrss keeps the peak of the forked test process, which after a thousand tests is
    itself over a gigabyte; VmHWM starts again at exec."""
    try:
        if Path(f"/proc/{pid}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes():
            return 0  # not yet exec'd: still the test process's copy
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def engines(*args: Any, tmpdir: Path | None = None, timeout: float = 120, on_start: Callable | None = None,
            code: str | None = None) -> Ran:
    """``engines ARGS`` as a process (this tree first on the path), measured; ``code``: a
    Python program run instead of ``-m cli.main`` (it calls cli.main.main itself)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINES_")}
    env["PYTHONPATH"] = str(ROOT)
    env["ENGINES_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "engines-test-cache-unused")
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, *(["-c", code] if code else ["-m", "cli.main"]), *map(str, args)],
                             stdout=o, stderr=e, env=env,
                             cwd=tmpdir or ROOT, start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        peak = [0]
        hwm = [0]
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.05):
                if tmpdir is not None:
                    peak[0] = max(peak[0], _du(tmpdir))
                hwm[0] = max(hwm[0], _child_hwm(p.pid))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        if on_start is not None:
            on_start(p)
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its last high-water mark
        hwm[0] = max(hwm[0], _child_hwm(p.pid))
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - t0
        timer.cancel()
        stop.set()
        watcher.join()
        o.seek(0)
        e.seek(0)
        return Ran(p.returncode, o.read().decode(errors="replace"), e.read().decode(errors="replace"), seconds,
                   hwm[0] or ru.ru_maxrss * 1024, peak[0])


def one_line(r: Ran) -> str:
    lines = [ln for ln in r.err.splitlines() if not ln.startswith("  ")]
    assert len(lines) == 1, r.err
    assert "a bug" not in r.err and "Traceback" not in r.err, r.err
    return lines[0]


# ------------------------------------------------------------------ bundles


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo's leaderboard bundle (2 targets, no dense row)."""
    from pipelines.demo import run_demo

    out = tmp_path_factory.mktemp("verify-hostile")
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ENGINES_")}
    try:
        run_demo(out, dense=False, targets=2, say=lambda _m: None)
    finally:
        os.environ.update(saved)
    bundle = out / "leaderboard.warc.gz"
    assert bundle.is_file()
    return bundle


Rec = list  # [type, warc headers (dict), http headers or None, body]


def read_records(path: Path) -> list[Rec]:
    from warcio.archiveiterator import ArchiveIterator

    drop = {"content-length", "warc-block-digest", "warc-payload-digest", "warc-type"}
    out = []
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            rtype = rec.rec_headers.get_header("WARC-Type")
            if rec.rec_headers.get_header("WARC-Target-URI") == END_URI:
                continue
            headers = {k: v for k, v in rec.rec_headers.headers if k.lower() not in drop}
            http = rec.http_headers if rtype in ("request", "response") else None
            body = rec.content_stream().read() if http is not None else rec.raw_stream.read()
            out.append([rtype, headers, http, body])
    return out


def write_records(path: Path, recs: list[Rec], *, end: bool = True) -> Path:
    """A valid WARC of ``recs`` (lengths and digests recomputed), with an end record counting
    them (``end``), or as a bundle written before end records."""
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as out:
        w = WARCWriter(out, gzip=True, warc_version="WARC/1.1")
        for i, (rtype, headers, http, body) in enumerate(recs):
            headers = dict(headers)
            if i == 0:
                headers.pop(H_END, None)
                if end:
                    headers[H_END] = END_URI
            if http is not None and rtype == "response":
                http.replace_header("Content-Length", str(len(body)))
            stream = body if hasattr(body, "read") else io.BytesIO(body)
            length = headers.pop("_length", None) or len(body)
            w.write_record(w.create_warc_record(
                headers.get("WARC-Target-URI", ""), rtype, payload=stream, length=length,
                warc_content_type=headers.pop("Content-Type", ""), warc_headers_dict=headers, http_headers=http))
        if end:
            body = json.dumps({"records": len(recs)}).encode()
            w.write_record(w.create_warc_record(END_URI, "resource", payload=io.BytesIO(body), length=len(body),
                                                warc_content_type="application/json",
                                                warc_headers_dict={H_RECORDS: str(len(recs))}))
    return path


def role(recs: list[Rec], name: str) -> Rec:
    return next(r for r in recs if r[1].get("WARC-Engines-Role") == name)


def resource(name: str, body: bytes | Any, *, meta: dict | None = None, length: int | None = None, **hdr: str) -> Rec:
    headers = {"WARC-Target-URI": f"urn:engines:{name}:x", "WARC-Engines-Role": name, "Content-Type": "application/json",
               **hdr}
    if meta is not None:
        headers["WARC-Engines-Meta"] = json.dumps(meta)
    if length is not None:
        headers["_length"] = length
    return ["resource", headers, None, body]


def with_options(recs: list[Rec], **changes: Any) -> list[Rec]:
    claim = role(recs, "claim")
    opts = json.loads(claim[1]["WARC-Engines-Options"])
    opts.update(changes)
    claim[1]["WARC-Engines-Options"] = json.dumps(opts)
    return recs


class Zeros(io.RawIOBase):
    """``n`` bytes of one repeated byte, read lazily (warcio compresses it as it writes)."""

    def __init__(self, n: int, byte: bytes = b"\n") -> None:
        self.left, self.block = n, byte * (1 << 20)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        k = min(self.left, len(self.block) if size < 0 else min(size, len(self.block)))
        self.left -= k
        return self.block[:k]


# ------------------------------------------------------------------ 1. no local file a bundle names


@pytest.mark.parametrize("what", ["file", "fifo", "/dev/zero", "/etc/passwd"])
@pytest.mark.parametrize("option", ["shared_with", "snapshots"])
def test_verify_never_reads_a_local_file_the_bundle_names(demo, tmp_path, what, option):
    if what == "file":
        target = tmp_path / "mine.txt"
        target.write_text("Nat.add_comm\n")
    elif what == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    else:
        target = Path(what)
    recs = read_records(demo)
    claim = json.loads(role(recs, "claim")[3])
    value = [str(target)] if option == "shared_with" else {claim["systems"][0]["id"]: str(target)}
    bad = write_records(tmp_path / "names-local.warc.gz", with_options(recs, subset=None, **{option: value}))
    r = engines("verify", bad, timeout=60)
    line = one_line(r)
    assert r.code == 2 and "never reads a file a bundle names" in line and str(target)[:40] in line, r.err
    assert r.seconds < 30 and r.rss < 1.5 * GIB


# ------------------------------------------------------------------ 2. bounded in total


def test_many_run_records_are_bounded_in_total(demo, tmp_path):
    """Three 100 MiB run records (a few hundred KB compressed): each under the old 512 MiB
    per-record bound, every one kept; now 128 MiB of kept records in total."""
    recs = read_records(demo)
    run = role(recs, "run")
    extra = [resource("run", Zeros(100 << 20), length=100 << 20, **{"WARC-Engines-Run": run[1]["WARC-Engines-Run"]})
             for _ in range(3)]
    bad = write_records(tmp_path / "runs.warc.gz", recs[:-1] + extra + recs[-1:])
    assert bad.stat().st_size < 2 << 20
    r = engines("verify", bad, tmpdir=tmp_path)
    line = one_line(r)
    assert r.code == 2 and "bound" in line and "134,217,728" in line, r.err
    assert r.rss < 600 << 20, r.rss


def test_corpus_records_are_bounded_in_total_and_in_temporary_space(demo, tmp_path):
    """Three 120 MiB corpus records (old bound: 16 GiB each, any number): the bundle's
    decompressed total (100x its size, at least 256 MiB) stops it, and its temporary
    directory never holds more than its bound (96x, at least 256 MiB)."""
    recs = read_records(demo)
    extra = [resource("corpus", Zeros(120 << 20), length=120 << 20,
                      meta={"name": "x", "revision": str(i), "file": "c.jsonl"}) for i in range(3)]
    bad = write_records(tmp_path / "corpora.warc.gz", recs + extra)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    r = engines("verify", bad, tmpdir=scratch)
    line = one_line(r)
    assert r.code == 2 and ("bound" in line or "decompression bomb" in line), r.err
    assert r.peak_temp <= max(256 << 20, 96 * bad.stat().st_size), r.peak_temp
    assert _du(scratch) == 0 and not list(scratch.iterdir())  # nothing left behind
    assert r.rss < 1.5 * GIB


def test_too_many_systems_are_refused(demo, tmp_path):
    recs = read_records(demo)
    run = role(recs, "run")
    extra = [resource("run", b"", **{"WARC-Engines-Run": run[1]["WARC-Engines-Run"]}) for _ in range(101)]
    bad = write_records(tmp_path / "systems.warc.gz", recs + extra)
    r = engines("verify", bad)
    assert r.code == 2 and "100 run records" in one_line(r), r.err


def test_the_temporary_directory_goes_on_sigterm_and_after_kill_9(demo, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # One left by a verify killed outright: its process is gone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = scratch / "engines-verify-left"
    left.mkdir()
    (left / "engines-verify.pid").write_text(f"{dead.pid} 1\n")
    (left / "verify.db").write_bytes(b"x" * 1000)
    alive = scratch / "engines-verify-alive"  # a running verify's: kept
    alive.mkdir()
    (alive / "engines-verify.pid").write_text(f"{os.getpid()}\n")

    def terminate(p: subprocess.Popen) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                d.name not in (left.name, alive.name) for d in scratch.glob("engines-verify-*")):
            time.sleep(0.01)
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)

    r = engines("verify", demo, tmpdir=scratch, on_start=terminate)
    assert r.code == 130 and "interrupted" in r.err, (r.code, r.err)
    assert [d.name for d in scratch.iterdir()] == ["engines-verify-alive"]


# ------------------------------------------------------------------ 3. truncation is always damage


def _members(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        end = len(data) - len(d.unused_data)
        out.append((pos, end))
        pos = end
    return out


def _cuts(data: bytes) -> list[int]:
    members = _members(data)
    cuts = {end for _, end in members[:-1]}  # every record boundary
    for start, end in members[1::max(1, len(members) // 12)]:
        cuts |= {start + 5, start + 40, (start + end) // 2, end - 3}  # inside a member, its trailer
    return sorted(c for c in cuts if 0 < c < len(data))


def test_every_cut_is_refused_by_import_and_verify_reading(demo, tmp_path):
    from archive.bundle import BadBundle, import_bundle
    from pipelines.verify_read import CannotVerify, read_contents
    from store.db import open_database

    data = demo.read_bytes()
    cuts = _cuts(data)
    assert len(cuts) > 30
    cut = tmp_path / "cut.warc.gz"
    for i, n in enumerate(cuts):
        cut.write_bytes(data[:n])
        with pytest.raises(CannotVerify, match="truncated|no partner|not a leaderboard|no WARC"):
            read_contents(cut, tmp_path)
        if i % 8 == 0:  # import: refused, and nothing written
            url = f"sqlite:///{tmp_path / f'imp{i}.db'}"
            db = open_database(url)
            try:
                with pytest.raises(BadBundle, match="truncated|no partner|no WARC"):
                    import_bundle(db, cut)
                with db.engine.connect() as c:
                    assert c.exec_driver_sql("SELECT count(*) FROM exchanges").scalar() == 0
            finally:
                db.dispose()


def test_a_cut_bundle_is_cannot_verify_and_import_refuses_it(demo, tmp_path):
    data = demo.read_bytes()
    members = _members(data)
    mid = members[len(members) // 2]
    for n in (mid[0] + 5, mid[1]):  # a few bytes into a member; exactly at a record boundary
        cut = tmp_path / f"cut{n}.warc.gz"
        cut.write_bytes(data[:n])
        r = engines("verify", cut)
        assert r.code == 2 and "cannot verify" in one_line(r) and "truncated" in r.err, r.err
        r = engines("--db", f"sqlite:///{tmp_path / f'i{n}.db'}", "import", cut)
        assert r.code == 1 and "truncated" in one_line(r) and "nothing was imported" in r.err, r.err


def test_a_bundle_written_before_end_records_still_verifies_and_imports(demo, tmp_path):
    old = write_records(tmp_path / "old.warc.gz", read_records(demo), end=False)
    r = engines("verify", old)
    assert r.code == 0 and "note: the bundle has no end record" in r.out, r.out + r.err
    r = engines("--db", f"sqlite:///{tmp_path / 'old.db'}", "import", old)
    assert r.code == 0 and "no end record" in r.err, r.err
    # Records added after the end record, or a wrong count: damage.
    recs = read_records(demo)
    joined = tmp_path / "joined.warc.gz"
    joined.write_bytes(demo.read_bytes() + write_records(tmp_path / "x.warc.gz", recs[:3]).read_bytes())
    r = engines("verify", joined)
    assert r.code == 2 and "follows the end record" in one_line(r), r.err


# ------------------------------------------------------------------ 4. verdicts


def test_a_second_claim_is_refused(demo, tmp_path):
    recs = read_records(demo)
    claim = role(recs, "claim")
    forged = json.loads(claim[3])
    forged["systems"][0]["metrics"]["nDCG@10"]["value"] = 0.999
    first = [claim[0], {k: v for k, v in claim[1].items() if k != "WARC-Record-ID"}, None, json.dumps(forged).encode()]
    at = recs.index(claim)
    bad = write_records(tmp_path / "two-claims.warc.gz", recs[:at] + [first] + recs[at:])
    r = engines("verify", bad)
    assert r.code == 2 and "second claim record" in one_line(r), r.out + r.err


def test_a_bad_digest_is_damage_and_a_refused_database_is_not_a_difference(demo, tmp_path):
    import gzip

    plain = gzip.decompress(demo.read_bytes())
    at = plain.index(b"WARC-Type: response")
    body = plain.index(b"\r\n\r\n", plain.index(b"\r\n\r\n", at) + 4) + 4
    raw = tmp_path / "raw.warc"
    raw.write_bytes(plain[:body] + (b"{" if plain[body:body + 1] != b"{" else b"[") + plain[body + 1:])
    r = engines("verify", raw)
    assert r.code == 2 and "digest" in one_line(r), r.err
    r = engines("verify", demo, "--db", f"sqlite:///{demo.parent / 'cache.db'}")
    assert r.code == 2 and "not empty" in one_line(r), r.err


# ------------------------------------------------------------------ 5. no "(a bug)" from the readers


def test_an_embedded_corpus_line_nested_100000_deep_is_one_line(demo, tmp_path):
    import hashlib

    from benchmarks import SLICE_CORPUS

    corpus = SLICE_CORPUS.read_bytes() + b"[" * 100_000 + b"]" * 100_000 + b"\n"
    sha = hashlib.sha256(corpus).hexdigest()
    recs = read_records(demo)
    info = recs[0]
    lines = []
    for line in info[3].decode().split("\r\n"):
        if line.startswith("corpus-ref: "):
            ref = json.loads(line[len("corpus-ref: "):])
            ref.update(sha256=sha, embedded=True)
            line = "corpus-ref: " + json.dumps(ref)
        lines.append(line)
    info[3] = "\r\n".join(lines).encode()
    meta = {**ref, "file": "declarations.jsonl"}
    bad = write_records(tmp_path / "deep.warc.gz", recs + [resource("corpus", corpus, meta=meta)])
    r = engines("verify", bad)
    line = one_line(r)
    assert r.code == 2 and "deep" in line, r.err


@pytest.mark.parametrize("spec", ["..", "a\0b.txt", "../../escape.txt", "/etc/passwd"])
def test_a_file_record_named_dotdot_or_with_a_nul_is_written_inside_the_temporary_directory(demo, tmp_path, spec):
    recs = read_records(demo)
    names = b"Nat.add_comm\nNat.mul_comm\n"
    file_rec = resource("file", names, meta={"role": "shared-with", "spec": spec})
    bad = write_records(tmp_path / "files.warc.gz", with_options(recs, shared_with=[spec])[:-1] + [file_rec]
                        + recs[-1:])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    r = engines("verify", bad, tmpdir=scratch)
    assert r.code in (1, 2), r.out + r.err  # the claim was scored without that file: differences
    if r.code == 2:
        one_line(r)
    assert "a bug" not in r.err and "Traceback" not in r.err
    assert not list(scratch.iterdir()) and not (tmp_path / "escape.txt").exists()


# ------------------------------------------------------------------ 6. publish: no .part, no absolute paths

# engines publish with every exchange written 50 ms apart (so that it can be stopped while it writes).
SLOW_PUBLISH = """
import sys, time
import archive.bundle.export as b
real = b._write_exchange
def slow(*a, **k):
    time.sleep(0.05)
    return real(*a, **k)
b._write_exchange = slow
from cli.main import main
sys.argv = ["engines", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_publish_stopped_leaves_no_part_file(demo, tmp_path, sig):
    out = tmp_path / "stopped.warc.gz"
    part = tmp_path / "stopped.warc.gz.part"

    def stop(p: subprocess.Popen) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (part.exists() and part.stat().st_size > 20_000):
            time.sleep(0.01)
        p.send_signal(sig)

    r = engines("--db", f"sqlite:///{demo.parent / 'cache.db'}", "publish", "--bench", "mathlibqr", "--subset",
                "demo-first-2", "--out", out, code=SLOW_PUBLISH, on_start=stop)
    assert r.code == 130 and "interrupted" in r.err, (r.code, r.err)
    assert not part.exists() and not out.exists()


def test_a_bundle_does_not_carry_the_publishers_paths(demo, tmp_path):
    """Name-list files, an imported run's file and a corpus loaded from a path travel by
    their names alone; the bundle still verifies."""
    import shutil

    from archive.runs import import_run
    from store.db import open_database

    where = tmp_path / "secret-home" / "lists"
    where.mkdir(parents=True)
    src = tmp_path / "src.db"
    shutil.copyfile(demo.parent / "cache.db", src)
    recs = read_records(demo)
    run_file = where / "mine.jsonl"
    run_file.write_bytes(role(recs, "run")[3])
    db = open_database(f"sqlite:///{src}")
    try:
        import_run(db, run_file, bench="mathlibqr", name="mine", source=str(run_file))
    finally:
        db.dispose()
    names = where / "names.txt"
    claim = json.loads(role(recs, "claim")[3])
    gold = sorted({n for q in claim["queries"] for unit in q["gold"] for n in unit})
    names.write_text("\n".join(gold[: len(gold) // 2]) + "\n")
    out = tmp_path / "paths.warc.gz"
    r = engines("--db", f"sqlite:///{src}", "publish", "--bench", "mathlibqr",
                "--shared-with", names, "--snapshot", f"{claim['systems'][0]['id']}={names}", "--out", out)
    assert r.code == 0, r.err
    import gzip

    plain = gzip.decompress(out.read_bytes())
    assert str(tmp_path).encode() not in plain and b"secret-home" not in plain
    assert str(ROOT).encode() not in plain  # the shipped corpus's path neither
    assert b"names.txt" in plain and b"mine.jsonl" in plain
    r = engines("verify", out)
    assert r.code == 0, r.out + r.err
