"""``engines publish``: one WARC/1.1 file that holds everything a leaderboard's numbers need.

The bundle is an ``engines export`` bundle (warcinfo, then request/response or metadata
records per exchange, written by :class:`archive.bundle.BundleWriter`) of every exchange
of each scored remote configuration and epoch, failures included, followed by
``resource`` records (format ``engines.leaderboard/1``):

- ``claim``: the score JSON (``engines.score/1``, as ``engines score --json`` writes it),
  with the scoring options in the ``WARC-Engines-Options`` header;
- ``run`` (one per local or imported system): its ranked lists in the run format
  (one JSON object a line: ``{"qid": ..., "ranked": [names]}``; a rank the engine left
  empty is ``null``) and, in ``WARC-Engines-Run``, the original configuration identity
  (hash, engine, endpoint version, parameters — model, renderer hash, source —, label,
  epoch);
- ``benchmark``: the scored benchmark as loaded (queries, styles, gold units) and
  ``subsets``: every loaded subset with its members, each with its original sha256;
- ``file``: the name-list files ``--shared-with`` / ``--snapshot`` named;
- ``corpus``: the corpus file itself with ``--with-corpus``; otherwise the warcinfo and
  the claim's headers name it by source, revision and sha256.

The warcinfo adds to the export's lines the tool version, each engine's parser version
and every hash (claim, runs, benchmark, corpora, files). ``engines import`` reads such a
bundle as any other (resource records are not exchanges); ``engines verify``
(:mod:`pipelines.verify`) re-derives the claim from it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import sqlalchemy as sa

from archive.bundle import BundleWriter, exchange_columns, record_id, software_fields, warc_date, warcinfo_fields
from engines import code_version
from engines.registry import ENGINES
from pipelines.bundle_corpora import find_corpus_file  # noqa: F401 - re-exported (pipelines.verify)
from pipelines.publish_paths import embedded_corpora, name_files, public_corpus, public_params, public_path
from scoring.results import score
from store.benchmarks import query_sha256
from store.corpus import pick_corpus
from store.corpus.source import sha256_file
from store.errors import InputError
from store.models import (
    Answer, Benchmark, EngineConfig, Epoch, Exchange, GoldName, GoldUnit, Hit, Query, Subset, SubsetMember,
)


FORMAT = "engines.leaderboard/1"
H_ROLE = "WARC-Engines-Role"
H_META = "WARC-Engines-Meta"
H_OPTIONS = "WARC-Engines-Options"
H_RUN = "WARC-Engines-Run"
URN = "urn:engines:"
# Options of engines score that the claim records (score()'s keyword names).
OPTION_KEYS = ("bench", "corpus", "subset", "systems", "by", "compare", "profile", "shared_with", "snapshots",
               "styles", "slice", "epochs")


def score_options(**kw: Any) -> dict[str, Any]:
    """The scoring options in the canonical recorded form (JSON-safe, defaults explicit)."""
    out = {k: kw.get(k) for k in OPTION_KEYS}
    out["profile"] = out["profile"] or "main"
    for k in ("systems", "by", "shared_with", "styles"):
        out[k] = list(out[k]) if out[k] else None
    if out["compare"]:
        c = out["compare"]
        out["compare"] = [list(c)] if len(c) == 2 and all(isinstance(x, str) for x in c) else [list(p) for p in c]
    else:
        out["compare"] = None
    out["snapshots"] = dict(out["snapshots"]) if out["snapshots"] else None
    if not out["bench"]:
        raise InputError("--bench is required: the benchmark to score and publish")
    return out


def run_score(db, options: dict[str, Any]):
    """``scoring.results.score`` with recorded options."""
    o = options
    return score(db, o["bench"], corpus=o["corpus"], subset=o["subset"], systems=o["systems"], by=o["by"],
                 compare=[tuple(p) for p in o["compare"]] if o["compare"] else None, profile=o["profile"],
                 shared_with=o["shared_with"], snapshots=o["snapshots"], styles=o["styles"], slice=o["slice"],
                 epochs=o["epochs"])


def claim_bytes(doc: dict[str, Any]) -> bytes:
    """The score JSON exactly as ``engines score --json`` serialises it."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")


def is_file_spec(spec: str) -> bool:
    """As scoring.scope.names_of decides: a name-list file, else a corpus in the database."""
    path = Path(spec).expanduser()
    return path.suffix in (".txt", ".json", ".lst") or path.exists()


# --------------------------------------------------------------------------- run format


def run_lines(rows: Iterable[tuple[str, list[str | None], int]]) -> Iterator[bytes]:
    """Run-format lines: (qid, names by rank with None for an empty rank, dropped items)."""
    for qid, ranked, dropped in rows:
        obj: dict[str, Any] = {"qid": qid, "ranked": ranked}
        if dropped:
            obj["dropped"] = dropped
        yield json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


MAX_RANKED = 100_000
MAX_LINE = 16 << 20


def read_run(data: bytes, where: str) -> Iterator[tuple[str, list[str | None], int]]:
    """Parse run-format bytes (bounded: line length, list length, value types)."""
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise InputError(f"{where}: line {lineno} is longer than {MAX_LINE} bytes")
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            raise InputError(f"{where}: line {lineno} is not JSON") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("qid"), str) or not isinstance(obj.get("ranked"), list):
            raise InputError(f"{where}: line {lineno} is not {{\"qid\": ..., \"ranked\": [names]}}")
        ranked = obj["ranked"]
        if len(ranked) > MAX_RANKED or not all(x is None or isinstance(x, str) for x in ranked):
            raise InputError(f"{where}: line {lineno}: 'ranked' must be at most {MAX_RANKED} names (or null)")
        dropped = obj.get("dropped", 0)
        if not isinstance(dropped, int) or isinstance(dropped, bool) or dropped < 0:
            raise InputError(f"{where}: line {lineno}: 'dropped' must be a count")
        yield obj["qid"], ranked, dropped


# --------------------------------------------------------------------------- dumps


def benchmark_dump(session, bench_name: str) -> dict[str, Any]:
    """The benchmark as loaded: every query with its gold units (re-created by verify)."""
    b = session.execute(sa.select(Benchmark).where(Benchmark.name == bench_name)).scalar_one()
    units: dict[int, list[dict[str, Any]]] = {}
    names: dict[int, list[str]] = {}
    for unit_id, name in session.execute(
        sa.select(GoldName.gold_unit_id, GoldName.name).join(GoldUnit, GoldUnit.id == GoldName.gold_unit_id)
        .join(Query, Query.id == GoldUnit.query_id).where(Query.benchmark_id == b.id).order_by(GoldName.id)
    ):
        names.setdefault(unit_id, []).append(name)
    for u in session.execute(sa.select(GoldUnit).join(Query, Query.id == GoldUnit.query_id)
                             .where(Query.benchmark_id == b.id).order_by(GoldUnit.ordinal)).scalars():
        units.setdefault(u.query_id, []).append({"ordinal": u.ordinal, "kind": u.kind, "names": names.get(u.id, [])})
    queries = [
        {"qid": q.qid, "target_id": q.target_id, "text": q.text, "style": q.style, "primary": q.primary,
         "kind": q.kind, "difficulty": q.difficulty, "meta": q.meta, "units": units.get(q.id, [])}
        for q in session.execute(sa.select(Query).where(Query.benchmark_id == b.id).order_by(Query.id)).scalars()
    ]
    return {"name": b.name, "task": b.task, "source_file": b.source_file, "sha256": b.sha256,
            "modified": b.modified, "meta": b.meta, "queries": queries}


def subsets_dump(session) -> list[dict[str, Any]]:
    out = []
    for sub in session.execute(sa.select(Subset).order_by(Subset.name)).scalars():
        members = list(session.execute(sa.select(SubsetMember.member).where(SubsetMember.subset_id == sub.id)
                                       .order_by(SubsetMember.member)).scalars())
        out.append({"name": sub.name, "member_kind": sub.member_kind, "source_file": sub.source_file,
                    "sha256": sub.sha256, "modified": sub.modified, "meta": sub.meta, "members": members})
    return out


# --------------------------------------------------------------------------- publish


@dataclass
class PublishSummary:
    path: Path
    sha256: str = ""
    bytes: int = 0
    exchanges: int = 0
    remote_systems: int = 0
    runs: int = 0
    corpus_embedded: bool = False
    corpora: list[dict[str, Any]] = field(default_factory=list)  # the corpora the bundle names
    claim: dict[str, Any] = field(default_factory=dict)


def _resource(writer, role: str, name: str, data: bytes, content_type: str, headers: dict[str, str],
              date: str) -> None:
    """A resource record whose id is derived from its content and whose date is the data's."""
    writer.write_resource(f"{URN}{role}:{name}", io.BytesIO(data), len(data), content_type,
                          {"WARC-Record-ID": record_id("resource", role, name, data), "WARC-Date": date,
                           H_ROLE: role, **headers})


def _hdr(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@dataclass
class _Parts:
    """What the bundle holds besides the claim, all read before anything is written."""

    configs: list[Any] = field(default_factory=list)  # remote configurations (detached)
    epoch_sel: dict[int, list[int]] = field(default_factory=dict)  # config id → its scored epochs
    info: bytes = b""  # the export's warcinfo fields (none without remote configurations)
    bench: dict[str, Any] = field(default_factory=dict)
    subsets: list[dict[str, Any]] = field(default_factory=list)
    corpora: list[dict[str, Any]] = field(default_factory=list)
    runs: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)  # (identity, run-format bytes)
    run_files: list[tuple[str, str, bytes]] = field(default_factory=list)  # (config hash, source, bytes)
    files: list[tuple[str, str, bytes]] = field(default_factory=list)  # (role, spec, bytes)
    embed: list[tuple[dict[str, Any], Path]] = field(default_factory=list)  # corpora written in full
    shas: list[str] = field(default_factory=list)  # the scored query texts (sha256): the exchanges published
    # The data's own time (the newest scored answer's fetch time): the claim's generated_at,
    # the warcinfo's created: and every non-exchange record's WARC-Date, so that publishing
    # the same database with the same options writes the same bytes.
    created: dt.datetime | None = None

    @property
    def date(self) -> str:
        return warc_date(self.created or dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc))


def publish_bundle(db, out: str | Path, options: dict[str, Any], *, with_corpus: bool = False,
                   progress=None) -> PublishSummary:
    """Score with ``options`` and write the leaderboard bundle to ``out`` (atomically)."""
    path = Path(out)
    if not (path.name.endswith(".warc.gz") or path.name.endswith(".warc")):
        raise InputError(f"--out {path}: name the bundle *.warc.gz (or *.warc for an uncompressed one)")
    if not path.parent.exists():
        raise InputError(f"directory {path.parent} for --out {path} does not exist; create it first")
    result = run_score(db, options)
    doc = result.to_json()
    if not doc["systems"]:
        raise InputError(f"no system has answers for benchmark {options['bench']!r} in these options: nothing to publish")
    for sysdoc in doc["systems"]:  # an imported run's file: its name, not where it lies on this machine
        if sysdoc.get("source"):
            sysdoc["source"] = public_path(sysdoc["source"])
        sysdoc["params"] = public_params(sysdoc.get("params")) if isinstance(sysdoc.get("params"), dict) \
            else sysdoc.get("params")

    # Rows without exchanges (local engines, imported runs: engine "run") travel as run records.
    local = [s for s in doc["systems"] if s["local"] or s["engine"] == "run"]
    remote = [s for s in doc["systems"] if s not in local]
    corpus_specs = [doc["corpus"]["name"] + "@" + doc["corpus"]["revision"]]
    corpus_specs += [s for s in (options["shared_with"] or []) if not is_file_spec(s)]
    corpus_specs += [s for s in (options["snapshots"] or {}).values() if not is_file_spec(s)]
    file_specs = [("shared-with", s) for s in (options["shared_with"] or []) if is_file_spec(s)]
    file_specs += [("snapshot", s) for s in (options["snapshots"] or {}).values() if is_file_spec(s)]

    parts = _read_parts(db, doc, local, remote, corpus_specs)
    if parts.created is not None:
        doc["generated_at"] = parts.created.isoformat(timespec="seconds")
    claim = claim_bytes(doc)
    summary = PublishSummary(path=path, claim=doc)
    parts.files, options = name_files(file_specs, options)
    if with_corpus:
        parts.embed = embedded_corpora(parts.corpora)
    info = _warcinfo(parts, claim, options, with_corpus)
    exported = _write_bundle(db, path, parts, info, claim, doc, options, summary, progress)
    summary.exchanges = exported.exchanges
    summary.remote_systems = len(remote)
    summary.runs = len(parts.runs)
    summary.corpus_embedded = bool(parts.embed)
    summary.corpora = parts.corpora
    return summary


def _read_parts(db, doc: dict[str, Any], local: list[dict[str, Any]], remote: list[dict[str, Any]],
                corpus_specs: list[str]) -> _Parts:
    """From the database: the remote configurations, the benchmark and subset dumps, the
    corpora and the run records of the local systems."""
    parts = _Parts(shas=sorted({query_sha256(q["text"]) for q in doc["queries"]}))
    with db.session() as s:
        parts.created = _data_time(s, doc["systems"], parts.shas)
        configs = list(s.execute(sa.select(EngineConfig).where(
            EngineConfig.config_hash.in_(sorted({x["config_hash"] for x in remote}) or ["-"]))
            .order_by(EngineConfig.id)).scalars())
        parts.epoch_sel = {c.id: sorted({x["epoch"] for x in remote if x["config_hash"] == c.config_hash})
                           for c in configs}
        parts.info = warcinfo_fields(s, configs, parts.epoch_sel, parts.date) if configs else b""
        for c in configs:
            s.expunge(c)
        parts.configs = configs
        parts.bench = benchmark_dump(s, doc["benchmark"]["name"])
        parts.subsets = subsets_dump(s)
        for spec in dict.fromkeys(corpus_specs):
            k = pick_corpus(s, spec)
            parts.corpora.append({"name": k.name, "revision": k.revision, "sha256": k.sha256, "source": k.source,
                                  "row_count": k.row_count})
        qid_of: dict[str, str] = {}
        bench_id = s.execute(sa.select(Benchmark.id).where(Benchmark.name == doc["benchmark"]["name"])).scalar_one()
        scored = set(parts.shas)  # a run record holds the scored texts' lists, as the exchanges do
        for qid, sha in s.execute(sa.select(Query.qid, Query.query_sha256).where(Query.benchmark_id == bench_id)
                                  .order_by(Query.id)):
            if sha in scored:
                qid_of.setdefault(sha, qid)
        for sysdoc in local:
            _add_run(s, sysdoc, qid_of, parts)
    return parts


def _data_time(s, systems: list[dict[str, Any]], shas: list[str]) -> dt.datetime | None:
    """When the newest answer the claim scores was fetched (None: no answer)."""
    newest = None
    for sysdoc in systems:
        cid = s.execute(sa.select(EngineConfig.id).where(EngineConfig.config_hash == sysdoc["config_hash"])).scalar_one()
        for i in range(0, len(shas), 900):
            t = s.execute(sa.select(sa.func.max(Answer.fetched_at)).where(
                Answer.config_id == cid, Answer.epoch == sysdoc["epoch"], ~Answer.superseded,
                Answer.query_sha256.in_(shas[i:i + 900]))).scalar()
            newest = t if t is not None and (newest is None or t > newest) else newest
    return newest


def _add_run(s, sysdoc: dict[str, Any], qid_of: dict[str, str], parts: _Parts) -> None:
    """A local or imported system's run record (and an imported run's original file, when
    it is still there with its recorded sha256)."""
    cfg = s.execute(sa.select(EngineConfig).where(EngineConfig.config_hash == sysdoc["config_hash"])).scalar_one()
    ep = s.get(Epoch, (cfg.id, sysdoc["epoch"]))
    ident = {"config_hash": cfg.config_hash, "engine": cfg.engine, "endpoint_version": cfg.endpoint_version,
             "params": public_params(cfg.params), "label": cfg.label, "local": bool(cfg.local), "result_cap": cfg.result_cap,
             "licence": cfg.licence, "epoch": sysdoc["epoch"],
             "epoch_label": ep.label if ep else None,
             "epoch_started": warc_date(ep.started_at) if ep and ep.started_at else None}
    answers = s.execute(sa.select(Answer.id, Answer.query_sha256, Answer.dropped_items).where(
        Answer.config_id == cfg.id, Answer.epoch == sysdoc["epoch"], ~Answer.superseded)
        .order_by(Answer.id)).all()
    answers = [a for a in answers if a.query_sha256 in qid_of]
    hits: dict[int, list[tuple[int, str]]] = {}
    ids = [a.id for a in answers]
    for i in range(0, len(ids), 900):
        for aid, rank, name in s.execute(sa.select(Hit.answer_id, Hit.rank, Hit.name)
                                         .where(Hit.answer_id.in_(ids[i:i + 900]))):
            hits.setdefault(aid, []).append((rank, name))
    rows = []
    for a in answers:
        hs = sorted(hits.get(a.id, []))
        ranked: list[str | None] = [None] * (hs[-1][0] if hs else 0)
        for rank, name in hs:
            ranked[rank - 1] = name
        rows.append((qid_of[a.query_sha256], ranked, a.dropped_items or 0))
    data = b"".join(run_lines(rows))
    parts.runs.append((ident, data))
    # An imported run also carries the original file's bytes, when it is still there.
    src, want = (cfg.params or {}).get("source"), (cfg.params or {}).get("sha256")
    if cfg.engine == "run" and src and want and Path(src).is_file():
        raw = Path(src).read_bytes()
        if hashlib.sha256(raw).hexdigest() == want:
            parts.run_files.append((cfg.config_hash, src, raw))


def _warcinfo(parts: _Parts, claim: bytes, options: dict[str, Any], with_corpus: bool) -> bytes:
    """The export's warcinfo fields (or the bundle's own, with no exchanges) and publish's lines."""
    lines = [f"publish-format: {FORMAT}", f"publisher: engines/{code_version()}",
             "claim: " + _hdr({"sha256": _sha(claim), "options": options})]
    for name in sorted(ENGINES):
        lines.append("parser: " + _hdr({"engine": name, "parser_version": ENGINES[name].parser_version}))
    for ident, data in parts.runs:
        lines.append("run: " + _hdr({**ident, "sha256": _sha(data)}))
    lines.append("benchmark-dump: " + _hdr({"name": parts.bench["name"], "sha256": parts.bench["sha256"]}))
    for k in parts.corpora:
        lines.append("corpus-ref: " + _hdr({**public_corpus(k), "embedded": with_corpus}))
    for role, spec, data in parts.files:
        lines.append("file: " + _hdr({"role": role, "spec": spec, "sha256": _sha(data)}))
    info = parts.info
    if not info:
        info = ("\r\n".join(software_fields(parts.date)) + "\r\n").encode("utf-8")
    return info + ("\r\n".join(lines) + "\r\n").encode("utf-8")


def _write_bundle(db, path: Path, parts: _Parts, info: bytes, claim: bytes, doc: dict[str, Any],
                  options: dict[str, Any], summary: PublishSummary, progress):
    """Write the bundle to ``path.part``, then into place; its sha256 and size into ``summary``.
    Returns the export's summary (exchanges written)."""
    with BundleWriter(path, info, info_headers={"WARC-Record-ID": record_id("warcinfo", path.name, info),
                                                "WARC-Date": parts.date}) as writer:
        _write_resources(writer, parts, claim, doc, options)
        for c in parts.configs:
            for epoch in parts.epoch_sel[c.id]:
                for row in _exchange_rows(db, c.id, epoch, set(parts.shas)):
                    writer.write_exchange(row, c.config_hash)
                    if progress is not None:
                        progress(writer.summary.exchanges)
        for k, p in parts.embed:
            with open(p, "rb") as cf:
                writer.write_resource(
                    f"{URN}corpus:{k['name']}@{k['revision']}", cf, p.stat().st_size,
                    "application/gzip" if p.name.endswith(".gz") else "application/jsonl",
                    {"WARC-Record-ID": record_id("resource", "corpus", k["sha256"]), "WARC-Date": parts.date,
                     H_ROLE: "corpus", H_META: _hdr({**public_corpus(k), "file": p.name})})
    summary.sha256 = sha256_file(path)
    summary.bytes = writer.summary.bytes
    return writer.summary


def _exchange_rows(db, config_id: int, epoch: int, shas: set[str]) -> Iterator[Any]:
    """The configuration's exchanges in this epoch that carried a scored query text (retries and
    failures included), in send order: what the claim's figures rest on, not every exchange the
    configuration ever made (a demo cut to 3 targets in a database of the full demo publishes
    its 3 targets' exchanges). Rows are read in batches: memory stays flat."""
    ex = Exchange.__table__
    with db.engine.connect() as conn:
        ids = [i for i, texts in conn.execute(
            sa.select(ex.c.id, ex.c.query_texts).where(ex.c.config_id == config_id, ex.c.epoch == epoch)
            .order_by(ex.c.sent_at, ex.c.id)) if any(query_sha256(t) in shas for t in texts or ())]
        for i in range(0, len(ids), 500):
            yield from conn.execute(sa.select(*exchange_columns()).where(ex.c.id.in_(ids[i:i + 500]))
                                    .order_by(ex.c.sent_at, ex.c.id))


def _write_resources(writer, parts: _Parts, claim: bytes, doc: dict[str, Any], options: dict[str, Any]) -> None:
    """The claim, benchmark, subsets, name-list file, run-file and run records, in that order."""
    bench, d = parts.bench, parts.date
    _resource(writer, "claim", "score.json", claim, "application/json",
              {H_OPTIONS: _hdr(options),
               H_META: _hdr({"corpora": [public_corpus(k) for k in parts.corpora], "code_version": doc["code_version"]})},
              d)
    _resource(writer, "benchmark", bench["name"], claim_bytes(bench), "application/json",
              {H_META: _hdr({"name": bench["name"], "sha256": bench["sha256"]})}, d)
    _resource(writer, "subsets", "subsets", claim_bytes(parts.subsets), "application/json", {}, d)
    for role, spec, data in parts.files:
        _resource(writer, "file", spec, data, "text/plain", {H_META: _hdr({"role": role, "spec": spec})}, d)
    for h, src, raw in parts.run_files:
        _resource(writer, "run-file", Path(src).name, raw, "application/octet-stream",
                  {H_META: _hdr({"config_hash": h, "source": public_path(src),
                                 "sha256": hashlib.sha256(raw).hexdigest()})}, d)
    for ident, data in parts.runs:
        _resource(writer, "run", f"{ident['config_hash']}@{ident['epoch']}", data, "application/jsonl",
                  {H_RUN: _hdr(ident)}, d)
