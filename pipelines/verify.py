"""``engines verify``: re-derive every figure of a published leaderboard bundle, offline.

A fresh database (a temporary SQLite file, or ``--db`` naming an empty one) receives what
the bundle holds: benchmark and subsets, the corpus (from the bundle, ``--corpus``, the
local cache or the corpora shipped with the package, always matched by sha256), every
exchange (through ``engines import``: digests verified, every body parsed with *today's*
parsers) and every run record (its configuration re-created with its original identity).
It then scores with exactly the options the claim records and compares every numeric
field of the score JSON, as serialised, with the claim's — except timestamps, the code
version and latencies. A system missing from either side is a difference.

The bundle is hostile input: :mod:`pipelines.verify_read` reads it, every record bounded
in size and digest-checked, JSON bounded in nesting depth, the corpus streamed to a
temporary file.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from archive.bundle import BadBundle, import_bundle, parse_warc_date
from engines import code_version
from engines.registry import ENGINES
from pipelines.publish import OPTION_KEYS, find_corpus_file, read_run, run_score
from pipelines.verify_read import CannotVerify, Contents, load_json, read_contents
from store.benchmarks import query_sha256
from store.corpus import load_corpus
from store.db import open_database
from store.errors import InputError
from store.models import (
    Answer, Benchmark, Corpus, EngineConfig, Epoch, Exchange, GoldName, GoldUnit, Query, Subset, SubsetMember,
)
from store.types import utcnow
from store.writes import AnswerRow, HitRow, add_answers, ensure_config


# Fields that are not figures: when and by what the claim was made, and latencies.
SKIP_KEYS = {"generated_at", "code_version"}


@dataclass
class Difference:
    system: str
    figure: str
    claimed: str
    derived: str


@dataclass
class VerifyReport:
    systems: int
    figures_equal: int
    differences: list[Difference]
    notes: list[str]
    exchanges: int = 0
    runs: int = 0


# --------------------------------------------------------------------------- loading


def _check_empty(db) -> None:
    with db.session() as s:
        for table in (Benchmark, Corpus, EngineConfig, Exchange, Answer):
            if s.execute(sa.select(sa.func.count()).select_from(table)).scalar_one():
                raise InputError(f"--db {db.url}: the database is not empty "
                                 f"(table {table.__tablename__} has rows); verify needs an empty database (or none: "
                                 "it makes a temporary one)")


def _load_benchmark(db, dump: Any) -> None:
    """The benchmark dump as rows: a few multi-row inserts (the ORM's unit of work took
    seconds for MathlibQR's 946 queries)."""
    try:
        queries = list(dump["queries"])
        with db.engine.begin() as conn:
            bt, qt, ut, nt = Benchmark.__table__, Query.__table__, GoldUnit.__table__, GoldName.__table__
            bench_id = conn.execute(sa.insert(bt).returning(bt.c.id), {
                "name": str(dump["name"]), "task": str(dump["task"]), "source_file": str(dump["source_file"]),
                "sha256": str(dump["sha256"]), "modified": bool(dump["modified"]), "meta": dump.get("meta"),
                "loaded_at": utcnow()}).scalar_one()
            if not queries:
                return
            qids = list(conn.execute(sa.insert(qt).returning(qt.c.id, sort_by_parameter_order=True), [
                {"benchmark_id": bench_id, "qid": str(q["qid"]), "target_id": str(q["target_id"]), "text": str(q["text"]),
                 "query_sha256": query_sha256(str(q["text"])), "style": str(q["style"]), "primary": bool(q["primary"]),
                 "kind": q.get("kind"), "difficulty": q.get("difficulty"), "meta": q.get("meta")}
                for q in queries]).scalars())
            units = [(qid, u) for qid, q in zip(qids, queries) for u in q["units"]]
            if not units:
                return
            uids = list(conn.execute(sa.insert(ut).returning(ut.c.id, sort_by_parameter_order=True), [
                {"query_id": qid, "ordinal": int(u["ordinal"]), "kind": str(u["kind"])} for qid, u in units]).scalars())
            names = [{"gold_unit_id": uid, "name": str(n)} for uid, (_, u) in zip(uids, units) for n in u["names"]]
            if names:
                conn.execute(sa.insert(nt), names)
    except (KeyError, TypeError, ValueError) as exc:
        raise CannotVerify(f"the bundle's benchmark record is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None


def _load_subsets(db, dump: Any) -> None:
    try:
        with db.session() as s, s.begin():
            for d in dump:
                sub = Subset(name=str(d["name"]), member_kind=str(d["member_kind"]), source_file=str(d["source_file"]),
                             sha256=str(d["sha256"]), modified=bool(d["modified"]), meta=d.get("meta"))
                s.add(sub)
                s.flush()
                s.add_all(SubsetMember(subset_id=sub.id, member=str(m)) for m in dict.fromkeys(d["members"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CannotVerify(f"the bundle's subsets record is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None


def _load_runs(db, runs: list[tuple[dict[str, Any], bytes]], qid_text: dict[str, str]) -> int:
    n = 0
    for ident, data in runs:
        try:
            h = str(ident["config_hash"])
            epoch = int(ident["epoch"])
            where = f"run record {h[:12]}@{epoch}"
            with db.session() as s, s.begin():
                cfg = ensure_config(s, engine=str(ident["engine"]), endpoint_version=str(ident["endpoint_version"]),
                                    params=ident["params"], config_hash=h, label=ident.get("label"),
                                    local=bool(ident.get("local", True)),
                                    result_cap=ident.get("result_cap"), licence=ident.get("licence"))
                s.flush()
                if ident.get("epoch_label") or ident.get("epoch_started"):
                    if s.get(Epoch, (cfg.id, epoch)) is None:
                        s.add(Epoch(config_id=cfg.id, epoch=epoch, label=ident.get("epoch_label"),
                                    started_at=parse_warc_date(ident["epoch_started"]) if ident.get("epoch_started") else None))
                rows = []
                for qid, ranked, dropped in read_run(data, where):
                    text = qid_text.get(qid)
                    if text is None:
                        raise CannotVerify(f"{where}: qid {qid!r} is not a query of the bundle's benchmark")
                    hits = [HitRow(rank=i + 1, name=nm) for i, nm in enumerate(ranked) if nm is not None]
                    rows.append(AnswerRow(config_id=cfg.id, query_text=text, query_sha256=query_sha256(text), hits=hits,
                                          epoch=epoch, dropped_items=dropped))
                add_answers(s, rows)
            n += 1
        except (KeyError, TypeError, ValueError) as exc:
            raise CannotVerify(f"a run record of the bundle is malformed ({type(exc).__name__}: {str(exc)[:80]})") from None
        except InputError as exc:
            raise CannotVerify(exc.message) from None
    return n


# --------------------------------------------------------------------------- comparing


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    """path → serialised number (or None where a figure is null), skipping non-figures."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in SKIP_KEYS or "latency" in k:
                continue
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)
    elif _num(obj):
        out[prefix] = json.dumps(obj)
    elif obj is None:
        out[prefix] = "null"


def _figures(doc: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(system key → figures, global figures); systems keyed by config hash and epoch."""
    systems: dict[str, dict[str, Any]] = {}
    for s in doc.get("systems") or []:
        if not isinstance(s, dict):
            continue
        key = f"{s.get('config_hash')}@{s.get('epoch')}"
        figs: dict[str, Any] = {}
        _flatten({k: v for k, v in s.items() if k not in ("id", "label")}, "", figs)
        systems[key] = figs
    glob: dict[str, Any] = {}
    rest = {k: v for k, v in doc.items() if k not in ("systems", "queries", "comparisons")}
    _flatten(rest, "", glob)
    for q in doc.get("queries") or []:
        if isinstance(q, dict):
            _flatten(q, f"queries[{q.get('qid')}]", glob)
    for c in doc.get("comparisons") or []:
        if isinstance(c, dict):
            _flatten({k: v for k, v in c.items() if k not in ("a", "b", "metric")},
                     f"comparisons[{c.get('a')} vs {c.get('b')} {c.get('metric')}]", glob)
    return systems, glob


def compare_docs(claimed: dict[str, Any], derived: dict[str, Any]) -> tuple[int, list[Difference], int]:
    """(figures equal, differences, systems compared) between the claim and the re-derived JSON."""
    names = {f"{s.get('config_hash')}@{s.get('epoch')}": str(s.get("id")) for s in derived.get("systems") or []
             if isinstance(s, dict)}
    names.update({f"{s.get('config_hash')}@{s.get('epoch')}": str(s.get("id")) for s in claimed.get("systems") or []
                  if isinstance(s, dict)})
    c_sys, c_glob = _figures(claimed)
    d_sys, d_glob = _figures(derived)
    equal = 0
    diffs: list[Difference] = []

    def cmp(system: str, a: dict[str, Any], b: dict[str, Any]) -> None:
        nonlocal equal
        for k in sorted(set(a) | set(b)):
            va, vb = a.get(k, "absent"), b.get(k, "absent")
            if va == vb:
                equal += 1
            else:
                diffs.append(Difference(system, k, va, vb))

    cmp("—", c_glob, d_glob)
    before = len(diffs)
    for key in sorted(set(c_sys) | set(d_sys), key=lambda k: names.get(k, k)):
        if key not in d_sys:
            diffs.append(Difference(names[key], "(system)", "present", "absent: no data in the bundle"))
        elif key not in c_sys:
            diffs.append(Difference(names[key], "(system)", "absent from the claim", "present"))
        else:
            cmp(names[key], c_sys[key], d_sys[key])
    # The headline figures first: system presence, metrics, counts, per query, then the rest.
    order = ("(system)", "metrics.", "n", "per_query", "resolution", "coverage", "curves", "pr.", "breakdowns")
    diffs[before:] = sorted(diffs[before:], key=lambda d: next(
        (i for i, p in enumerate(order) if d.figure.startswith(p)), len(order)))
    return equal, diffs, len(set(c_sys) & set(d_sys))


# --------------------------------------------------------------------------- verify


def _checked_options(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """The claim's scoring options, each of the type engines score gives it (hostile input)."""
    def strs(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(x, str) for x in v)

    checks = {
        "bench": lambda v: isinstance(v, str) and v != "",
        "systems": lambda v: v is None or strs(v), "by": lambda v: v is None or strs(v),
        "shared_with": lambda v: v is None or strs(v), "styles": lambda v: v is None or strs(v),
        "compare": lambda v: v is None or (isinstance(v, list) and all(strs(p) and len(p) == 2 for p in v)),
        "snapshots": lambda v: v is None or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
    }
    out = {}
    for k in OPTION_KEYS:
        v = raw.get(k)
        ok = checks.get(k, lambda x: x is None or isinstance(x, str))(v)
        if not ok:
            raise CannotVerify(f"{path}: the claim's scoring option {k!r} is malformed ({str(v)[:60]}); the bundle is damaged")
        out[k] = v
    out["profile"] = out["profile"] or "main"
    return out


def _corpus_missing(ref: dict[str, Any], bundle: Path) -> CannotVerify:
    from pipelines.corpus_hint import how_to_get

    return CannotVerify(
        f"corpus {ref.get('name')}@{ref.get('revision')} (sha256 {ref.get('sha256')}) is not in the bundle, not given "
        f"with --corpus, not in the local cache and not shipped with engines; run {how_to_get(ref, bundle)}")



def verify_bundle(path: str | Path, *, corpus: str | Path | None = None, db_url: str | None = None,
                  say=None) -> VerifyReport:
    """Re-derive the claim of a leaderboard bundle; the report of what differs."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"bundle {path} does not exist; give the path of a .warc.gz file written by engines publish")
    say = say or (lambda _m: None)
    with tempfile.TemporaryDirectory(prefix="engines-verify-") as tmpname:
        tmp = Path(tmpname)
        contents = read_contents(path, tmp)
        claimed = load_json(contents.claim, f"{path}: the claim")
        if not isinstance(claimed, dict) or not isinstance(claimed.get("systems"), list):
            raise CannotVerify(f"{path}: the claim is not an engines.score document")
        options = _checked_options(contents.options, path)
        corpus_files = _corpus_files(contents, corpus, path)

        url = db_url or f"sqlite:///{tmp / 'verify.db'}"
        db = open_database(url)
        try:
            if db_url:
                _check_empty(db)
            summary, n_runs = _load_bundle(db, path, contents, corpus_files, say)
            spec_map = _write_files(contents, tmp)
            derived = _rederive(db, options, claimed, spec_map)
        finally:
            db.dispose()

    equal, diffs, n_systems = compare_docs(claimed, derived)
    return VerifyReport(systems=n_systems, figures_equal=equal, differences=diffs, notes=_notes(claimed, contents),
                        exchanges=summary.exchanges_read, runs=n_runs)


def _corpus_files(contents: Contents, corpus: str | Path | None, path: Path) -> list[tuple[dict[str, Any], Path]]:
    """Each corpus the claim names, with its file: from the bundle, --corpus, the local cache
    or the package, by sha256."""
    refs = [r for r in contents.info.get("corpus-ref", []) if isinstance(r, dict)]
    if not refs:
        refs = [r for r in contents.claim_meta.get("corpora", []) if isinstance(r, dict)]
    embedded = {m.get("_file_sha256"): p for m, p in contents.corpora}
    corpus_files: list[tuple[dict[str, Any], Path]] = []
    for ref in refs:
        want = str(ref.get("sha256"))
        found = embedded.get(want)
        if found is None:
            extra = [Path(corpus).expanduser()] if corpus else []
            found = find_corpus_file(want, None, extra)
            if found is None and str(ref.get("source", "")).startswith("hf://"):
                found = find_corpus_file(want, str(ref["source"]), extra)
        if found is None:
            if corpus and Path(corpus).expanduser().is_file():
                raise CannotVerify(f"--corpus {corpus}: its sha256 is not {want} (corpus {ref.get('name')}@"
                                   f"{ref.get('revision')}); get that file from {ref.get('source')}")
            raise _corpus_missing(ref, path)
        corpus_files.append((ref, found))
    if not corpus_files:
        raise CannotVerify(f"{path}: the bundle names no corpus; it cannot be verified")
    return corpus_files


def _load_bundle(db, path: Path, contents: Contents, corpus_files: list[tuple[dict[str, Any], Path]], say):
    """Benchmark, subsets, corpora, exchanges (through engines import) and run records into
    the fresh database: (the import summary, the number of run records)."""
    bench = load_json(contents.benchmark, f"{path}: the benchmark record")
    _load_benchmark(db, bench)
    if contents.subsets is not None:
        _load_subsets(db, load_json(contents.subsets, f"{path}: the subsets record"))
    for ref, file in corpus_files:
        try:
            load_corpus(db, str(file), name=str(ref["name"]), revision=str(ref["revision"]))
        except InputError as exc:
            raise CannotVerify(f"corpus {ref.get('name')}@{ref.get('revision')}: {exc.message}") from None
    say(f"loaded benchmark {bench.get('name')}, {len(corpus_files)} corpus file(s)")
    try:
        summary = import_bundle(db, path)
    except BadBundle as exc:
        raise CannotVerify(exc.message) from None
    qid_text = {str(q["qid"]): str(q["text"]) for q in bench["queries"]}
    n_runs = _load_runs(db, contents.runs, qid_text)
    say(f"imported {summary.exchanges_read:,} exchanges ({summary.answers:,} answers parsed with today's "
        f"parsers) and {n_runs} run(s)")
    return summary, n_runs


def _write_files(contents: Contents, tmp: Path) -> dict[str, str]:
    """Name-list files written back under their own names: the claim's spec → the file."""
    files_dir = tmp / "files"
    files_dir.mkdir()
    spec_map: dict[str, str] = {}
    for meta, data in contents.files:
        spec = str(meta.get("spec"))
        name = Path(spec).name or "names.txt"
        sub = files_dir / str(len(spec_map))
        sub.mkdir()
        (sub / name).write_bytes(data)
        spec_map[spec] = str(sub / name)
    return spec_map


def _rederive(db, options: dict[str, Any], claimed: dict[str, Any], spec_map: dict[str, str]) -> dict[str, Any]:
    """The score JSON with the claim's options, the options pointed at the written files."""
    if options.get("shared_with"):
        options["shared_with"] = [spec_map.get(s, s) for s in options["shared_with"]]
    # Every system in the bundle (it holds exactly the claimed ones); ids may differ
    # from the source database's (labels, epochs), so compare/snapshots are mapped.
    wanted_compare = options.get("compare")
    wanted_snaps = options.get("snapshots")
    options.update(systems=None, epochs="all", compare=None, snapshots=None)
    derived = run_score(db, options).to_json()
    if wanted_compare or wanted_snaps:
        by_key = {f"{s['config_hash']}@{s['epoch']}": s["id"] for s in derived["systems"]}
        claimed_key = {s.get("id"): f"{s.get('config_hash')}@{s.get('epoch')}" for s in claimed["systems"]
                       if isinstance(s, dict)}

        def mapped(sid: str) -> str:
            return by_key.get(claimed_key.get(sid, ""), sid)

        if wanted_compare:
            options["compare"] = [[mapped(a), mapped(b)] for a, b in wanted_compare]
        if wanted_snaps:
            options["snapshots"] = {mapped(k): spec_map.get(v, v) for k, v in wanted_snaps.items()}
        derived = run_score(db, options).to_json()
    # The re-derived ids as the claim names them, so comparisons line up.
    rename = {s["id"]: next((c.get("id") for c in claimed["systems"] if isinstance(c, dict)
                             and c.get("config_hash") == s["config_hash"] and c.get("epoch") == s["epoch"]),
                            s["id"]) for s in derived["systems"]}
    for c in derived.get("comparisons") or []:
        c["a"], c["b"] = rename.get(c["a"], c["a"]), rename.get(c["b"], c["b"])
    return derived


def _notes(claimed: dict[str, Any], contents: Contents) -> list[str]:
    """What differs between the claim's tools and today's: the code and parser versions."""
    notes = []
    claimed_version = claimed.get("code_version")
    if claimed_version != code_version():
        notes.append(f"tool version differs: the claim was made by engines {claimed_version}, this is {code_version()}")
    for p in contents.info.get("parser", []):
        if isinstance(p, dict) and p.get("engine") in ENGINES:
            now = ENGINES[p["engine"]].parser_version
            if p.get("parser_version") != now:
                notes.append(f"parser version differs: {p['engine']} was parsed by version {p.get('parser_version')} "
                             f"for the claim, today's is {now}")
    return notes
