"""TREC export: qrels and one run file per system, readable by trec_eval and ir_measures.

Written so that trec_eval's numbers equal ours:

- DOCNOs are reversible and collision-free: a name is percent-encoded as UTF-8
  (:func:`docno`, undone by :func:`name_of`), so two distinct Unicode names never share a
  DOCNO and no DOCNO holds whitespace. ``!`` is always encoded inside names, so the
  placeholders below (which start with ``!``) can never equal a name's DOCNO.
- ``qrels.txt``: ``QID 0 DOCNO 1`` per scored gold unit; a unit's DOCNO is its first name
  not already taken by an earlier unit of the query (``!u<j>!<name>`` if all are).
- ``run.<tag>.txt`` (``:`` in the tag is ``_`` in the file name): ``QID Q0 DOCNO RANK SCORE TAG`` for every returned row within
  k_max. trec_eval ignores the rank column and re-sorts by score, so SCORE is
  ``k_max + 1 − rank``: strictly decreasing, ties impossible. A row credited to a unit
  by the scorer's maximum matching (:mod:`scoring.matching`) carries that unit's DOCNO;
  a repeated row, or a gold row the matching did not credit, becomes ``!dup!<rank>``
  and keeps its slot, exactly as the scorer's positions do.
- ``docnos.tsv``: every DOCNO written, with the name (or placeholder meaning) it stands
  for, and for qrels DOCNOs the query and the group's names.
- ``docnos.tsv`` also names each run's result cap in a ``# result_cap<TAB>TAG<TAB>N|none``
  comment line, so ``engines run import`` gives the row the same cap (an exact round trip).
- one TAG per system (its id, made safe), unanswered queries have no lines (ir_measures
  then scores them 0, as we do; plain trec_eval needs ``-c`` for that).

Precision-type figures (P@k, nDCG@k, AP, RR) therefore agree everywhere. Recall-type
figures agree wherever a query's units are disjoint; on the few queries whose groups
share a name (JSON ``overlapping_units``) the scorer counts a shared row for every group
it belongs to, while a run line carries one DOCNO, so trec_eval's R@k there is h₁(k)/|G|.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote

import sqlalchemy as sa

from scoring.matching import match_rows
from scoring.resolve import RESOLVED, chunked
from scoring.results import ScoreResult
from store.benchmarks import query_sha256
from store.db import Database
from store.errors import InputError
from store.models import Answer, Corpus, Hit

_UNSAFE = re.compile(r"[^A-Za-z0-9._\-+@#:]")
# Printable ASCII kept as is in a DOCNO; "!" and "%" (and whitespace, non-ASCII) are encoded.
_DOCNO_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "!%")
MAPPING_FILE = "docnos.tsv"


def safe_token(text: str) -> str:
    """A run tag: trec_eval-safe, not reversible (tags are system ids, listed in the mapping)."""
    return _UNSAFE.sub("_", text.strip()) or "_"


def docno(name: str) -> str:
    """The reversible DOCNO of a corpus name (UTF-8 percent-encoding)."""
    return quote(name, safe=_DOCNO_SAFE) or "%"


def name_of(doc: str) -> str | None:
    """The name a DOCNO stands for; None for placeholders."""
    if doc.startswith("!"):
        return None
    return "" if doc == "%" else unquote(doc, errors="strict")


def _qrels_docnos(gold: list[list[str]]) -> list[str]:
    """One DOCNO per unit: its first name not already taken by an earlier unit."""
    used: set[str] = set()
    out = []
    for j, names in enumerate(gold):
        pick = next((docno(n) for n in names if docno(n) not in used), None)
        doc = pick if pick is not None else f"!u{j}!{docno(names[0])}"
        used.add(doc)
        out.append(doc)
    return out


def export_trec(db: Database, result: ScoreResult, out_dir: str | Path) -> list[Path]:
    """Write qrels.txt, run.<tag>.txt for every system and docnos.tsv; return the paths."""
    if result.profile != "main":
        raise InputError("--trec exports the main profile only (trec_eval has no MAMUT recipe)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--trec {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    k_max = result.k_max
    queries = result.queries
    docnos = {q["qid"]: _qrels_docnos(q["gold"]) for q in queries}
    mapping: dict[str, str] = {}
    paths = [out / "qrels.txt"]
    with open(paths[0], "w", encoding="utf-8") as fh:
        for q in queries:
            for doc, names in zip(docnos[q["qid"]], q["gold"]):
                fh.write(f"{q['qid']} 0 {doc} 1\n")
                mapping.setdefault(doc, names[0] if name_of(doc) is None else name_of(doc))

    with db.session() as s:
        corpus_id = s.execute(
            sa.select(Corpus.id).where(Corpus.name == result.corpus["name"], Corpus.revision == result.corpus["revision"])
        ).scalar_one()
        by_qid_sha = {q["qid"]: query_sha256(q["text"]) for q in queries}
        tags: set[str] = set()
        files: set[str] = set()
        caps: dict[str, int | None] = {}  # run tag → the system's result cap (read back by archive.runs)
        for system in result.systems:
            ref = system.ref
            tag = safe_token(ref.id)
            while tag in tags:
                tag += "_"
            tags.add(tag)
            caps[tag] = ref.result_cap
            hits = _system_hits(s, ref.config_id, ref.epoch, corpus_id, sorted(set(by_qid_sha.values())), k_max)
            # The file's name carries no ":" (a system id like dense:model has one; Windows, scp
            # and Finder take it for something else); the tag inside the file keeps it.
            stem = tag.replace(":", "_")
            while stem in files:
                stem += "_"
            files.add(stem)
            path = out / f"run.{stem}.txt"
            with open(path, "w", encoding="utf-8") as fh:
                for q in queries:
                    ranked = hits.get(by_qid_sha[q["qid"]])
                    if ranked is None:
                        continue
                    gold_names = {n for names in q["gold"] for n in names}
                    unit_docs = set(docnos[q["qid"]])
                    credited = match_rows([(r, n) for r, n, ok in ranked if ok], q["gold"], k_max)
                    seen: set[str] = set()
                    for rank, name, resolved in ranked:
                        doc = None
                        if rank in credited:
                            doc = docnos[q["qid"]][credited[rank]]
                        elif name is not None and not (resolved and name in gold_names):
                            doc = docno(name)
                        if doc is None or doc in seen or (rank not in credited and doc in unit_docs):
                            doc = f"!dup!{rank}"
                        seen.add(doc)
                        mapping.setdefault(doc, name_of(doc) if not doc.startswith("!") else "(placeholder: repeat or uncredited gold row)")
                        fh.write(f"{q['qid']} Q0 {doc} {rank} {k_max + 1 - rank} {tag}\n")
            paths.append(path)
    mpath = out / MAPPING_FILE
    with open(mpath, "w", encoding="utf-8") as fh:
        fh.write("# DOCNO\tname (percent-decoded UTF-8; '!' DOCNOs are placeholders)\n")
        for tag, cap in sorted(caps.items()):
            fh.write(f"# result_cap\t{tag}\t{'none' if cap is None else cap}\n")
        for doc in sorted(mapping):
            fh.write(f"{doc}\t{mapping[doc]}\n")
    paths.append(mpath)
    return paths


def _system_hits(
    session, config_id: int, epoch: int, corpus_id: int, shas: list[str], k_max: int
) -> dict[str, list[tuple[int, str | None, bool]]]:
    a, h = Answer.__table__, Hit.__table__
    out: dict[str, list[tuple[int, str | None, bool]]] = {}
    for chunk in chunked(shas):
        for (sha,) in session.execute(
            sa.select(a.c.query_sha256).where(a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded)
        ):
            out.setdefault(sha, [])
        for sha, rank, name, res, rc in session.execute(
            sa.select(a.c.query_sha256, h.c.rank, h.c.normalized_name, h.c.resolution, h.c.resolved_corpus_id)
            .select_from(h.join(a, h.c.answer_id == a.c.id))
            .where(a.c.config_id == config_id, a.c.epoch == epoch, a.c.query_sha256.in_(chunk), ~a.c.superseded, h.c.rank <= k_max)
            .order_by(a.c.query_sha256, h.c.rank)
        ):
            out[sha].append((rank, name, res == RESOLVED and rc == corpus_id))
    return out
