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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from archive.bundle import BadBundle, import_bundle
from engines import code_version
from engines.registry import ENGINES
from pipelines.publish import OPTION_KEYS, find_corpus_file, is_file_spec, run_score
from pipelines.verify_load import check_empty, check_size, load_benchmark, load_runs, load_subsets
from pipelines.verify_read import MAX_SYSTEMS, CannotVerify, Contents, load_json, read_contents
from pipelines.verify_temp import TempBudget, verify_tempdir
from store.corpus import load_corpus, pick_corpus
from store.db import open_database
from store.errors import InputError

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
    budget = TempBudget(path.stat().st_size)
    with verify_tempdir() as tmp:
        contents = read_contents(path, tmp, budget)
        claimed = load_json(contents.claim, f"{path}: the claim")
        if not isinstance(claimed, dict) or not isinstance(claimed.get("systems"), list):
            raise CannotVerify(f"{path}: the claim is not an engines.score document")
        if len(claimed["systems"]) > MAX_SYSTEMS:
            raise CannotVerify(f"{path}: the claim lists {len(claimed['systems']):,} systems, over the bound of "
                               f"{MAX_SYSTEMS} verify re-derives; refused")
        options = _checked_options(contents.options, path)
        _refuse_local_names(options, contents)
        corpus_files = _corpus_files(contents, corpus, path)
        budget.local_bytes = sum(f.stat().st_size for _, f in corpus_files if tmp not in f.parents)
        spec_map = _write_files(contents, tmp, budget)

        url = db_url or f"sqlite:///{tmp / 'verify.db'}"
        db = open_database(url)
        try:
            if db_url:
                check_empty(db)
            else:
                budget.bound_sqlite(db)
            summary, n_runs = _load_bundle(db, path, contents, corpus_files, say)
            check_size(db, options, path)
            derived = _rederive(db, options, claimed, spec_map)
        except sa.exc.OperationalError as exc:
            if budget.exceeded(exc):
                raise CannotVerify(f"{path}: re-deriving the bundle needs more than {budget.describe()}; "
                                   "refused") from None
            raise
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
        refs = [r for r in _listed(contents.claim_meta.get("corpora")) if isinstance(r, dict)]
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
    load_benchmark(db, bench)
    if contents.subsets is not None:
        load_subsets(db, load_json(contents.subsets, f"{path}: the subsets record"))
    for ref, file in corpus_files:
        try:
            load_corpus(db, str(file), name=str(ref["name"]), revision=str(ref["revision"]))
        except InputError as exc:
            raise CannotVerify(f"corpus {ref.get('name')}@{ref.get('revision')}: {exc.message}") from None
        except RecursionError:
            raise CannotVerify(f"corpus {ref.get('name')}@{ref.get('revision')}: a line nests JSON too deep to "
                               "read; the bundle is damaged or hostile") from None
    say(f"loaded benchmark {bench.get('name')}, {len(corpus_files)} corpus file(s)")
    try:
        summary = import_bundle(db, path)
    except BadBundle as exc:
        raise CannotVerify(exc.message) from None
    qid_text = {str(q["qid"]): str(q["text"]) for q in bench["queries"]}
    n_runs = load_runs(db, contents.runs, qid_text)
    say(f"imported {summary.exchanges_read:,} exchanges ({summary.answers:,} answers parsed with today's "
        f"parsers) and {n_runs} run(s)")
    return summary, n_runs


def _write_files(contents: Contents, tmp: Path, budget) -> dict[str, str]:
    """Name-list files written into the temporary directory: the claim's spec → the file. The
    file's name is made here (only its suffix is taken from the spec: it says how to read the
    list), so a spec of ``..``, with a NUL or a path in it, writes nowhere else."""
    files_dir = tmp / "files"
    files_dir.mkdir()
    spec_map: dict[str, str] = {}
    for meta, data in contents.files:
        spec = str(meta.get("spec"))
        if spec in spec_map:  # one file for --shared-with and --snapshot: twice, the same bytes
            if Path(spec_map[spec]).read_bytes() != data:
                raise CannotVerify(f"two file records of the bundle are both named {spec[:80]!r} with different "
                                   "contents; the bundle is damaged")
            continue
        suffix = Path(spec.replace("\0", "")).suffix
        name = f"{len(spec_map)}{suffix if suffix in ('.txt', '.json', '.lst') else '.txt'}"
        budget.charge(len(data), f"file record {spec[:80]!r}")
        (files_dir / name).write_bytes(data)
        spec_map[spec] = str(files_dir / name)
    return spec_map


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _refuse(opt: str, spec: str) -> CannotVerify:
    return CannotVerify(f"the claim's {opt} entry {spec[:80]!r} is neither a file record of the bundle nor a corpus "
                        "it names; verify never reads a file a bundle names from this machine: the bundle is "
                        "damaged or hostile")


def _refuse_local_names(options: dict[str, Any], contents: Contents) -> None:
    """Before anything is loaded: every --shared-with / --snapshot entry of the claim is a file
    record of the bundle or one of the corpora it names (:func:`_local_names` maps them)."""
    files = {str(m.get("spec")) for m, _ in contents.files}
    refs = [r for r in contents.info.get("corpus-ref", []) + _listed(contents.claim_meta.get("corpora"))
            if isinstance(r, dict)]
    corpora = {str(r.get("name")) for r in refs} | {f"{r.get('name')}@{r.get('revision')}" for r in refs}
    for opt, entries in (("--shared-with", options.get("shared_with") or []),
                         ("--snapshot", list((options.get("snapshots") or {}).values()))):
        for spec in entries:
            if spec not in files and (spec not in corpora or is_file_spec(spec)):
                raise _refuse(opt, spec)


def _local_names(db, options: dict[str, Any], spec_map: dict[str, str]) -> None:
    """Point the claim's --shared-with / --snapshot entries at the bundle's own records: a file
    record (written to the temporary directory), or a corpus loaded from the bundle's
    references. Anything else -- a path on this machine (/etc/passwd, /dev/zero, a FIFO) --
    is refused: verify never reads a local file a bundle names."""
    def mapped(opt: str, spec: str) -> str:
        if spec in spec_map:
            return spec_map[spec]
        with db.session() as s:
            try:
                pick_corpus(s, spec)
                is_corpus = True
            except InputError:
                is_corpus = False
        if not is_corpus or is_file_spec(spec):
            raise _refuse(opt, spec)
        return spec

    if options.get("shared_with"):
        options["shared_with"] = [mapped("--shared-with", x) for x in options["shared_with"]]
    if options.get("snapshots"):
        options["snapshots"] = {k: mapped("--snapshot", v) for k, v in options["snapshots"].items()}


def _rederive(db, options: dict[str, Any], claimed: dict[str, Any], spec_map: dict[str, str]) -> dict[str, Any]:
    """The score JSON with the claim's options, the options pointed at the written files."""
    _local_names(db, options, spec_map)
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
            options["snapshots"] = {mapped(k): v for k, v in wanted_snaps.items()}
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
    if contents.unterminated:
        notes.append("the bundle has no end record (written by an older engines): a cut exactly between two "
                     "records could not be seen; every record read was complete and digest-checked")
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
