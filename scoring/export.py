"""TREC export: qrels and one run file per system, readable by trec_eval and ir_measures.

Written so that trec_eval's numbers equal ours wherever its conventions allow:

- ``qrels.txt``: ``QID 0 DOCNO 1`` per scored gold unit. A unit is one relevant
  document whose DOCNO is its first name present in the corpus (a premise group's other
  names map to the same DOCNO in the runs, so "any name hits the group" survives).
- ``run.<tag>.txt``: ``QID Q0 DOCNO RANK SCORE TAG`` for every returned row within
  k_max. trec_eval ignores the rank column and re-sorts by score, so SCORE is
  ``k_max + 1 − rank``: strictly decreasing, ties impossible. A repeated row (or a
  second name of an already-credited unit) becomes a placeholder DOCNO
  ``dup@<rank>`` that keeps its slot, exactly as the scorer's positions do.
- one TAG per system (its id, made safe), unanswered queries have no lines (ir_measures
  then scores them 0, as we do; plain trec_eval needs ``-c`` for that).

Deliberate difference: when one returned row belongs to two premise groups (10 shared
names in MathlibMPR), the scorer credits both units at that position but a run line can
carry only one DOCNO, so trec_eval credits one.
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from scoring.resolve import RESOLVED, _chunks
from scoring.results import ScoreResult
from store.benchmarks import query_sha256
from store.db import Database
from store.errors import InputError
from store.models import Answer, Corpus, Hit

_UNSAFE = re.compile(r"[^A-Za-z0-9._\-+@#:]")


def safe_token(text: str) -> str:
    return _UNSAFE.sub("_", text.strip()) or "_"


def _qrels_docnos(gold: list[list[str]]) -> list[str]:
    """One DOCNO per unit: its first name not already taken by an earlier unit."""
    used: set[str] = set()
    out = []
    for j, names in enumerate(gold):
        pick = next((n for n in names if safe_token(n) not in used), None)
        doc = safe_token(pick) if pick is not None else f"{safe_token(names[0])}#{j}"
        used.add(doc)
        out.append(doc)
    return out


def export_trec(db: Database, result: ScoreResult, out_dir: str | Path) -> list[Path]:
    """Write qrels.txt and run.<tag>.txt files for every system; return the paths."""
    if result.profile != "main":
        raise InputError("--trec exports the main profile only (trec_eval has no MAMUT recipe)")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--trec {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    k_max = result.k_max
    queries = result.queries
    docnos = {q["qid"]: _qrels_docnos(q["gold"]) for q in queries}
    paths = [out / "qrels.txt"]
    with open(paths[0], "w", encoding="utf-8") as fh:
        for q in queries:
            for doc in docnos[q["qid"]]:
                fh.write(f"{q['qid']} 0 {doc} 1\n")

    with db.session() as s:
        corpus_id = s.execute(
            sa.select(Corpus.id).where(Corpus.name == result.corpus["name"], Corpus.revision == result.corpus["revision"])
        ).scalar_one()
        by_qid_sha = {q["qid"]: query_sha256(q["text"]) for q in queries}
        tags: set[str] = set()
        for system in result.systems:
            ref = system.ref
            tag = safe_token(ref.id)
            while tag in tags:
                tag += "_"
            tags.add(tag)
            hits = _system_hits(s, ref.config_id, ref.epoch, corpus_id, sorted(set(by_qid_sha.values())), k_max)
            path = out / f"run.{tag}.txt"
            with open(path, "w", encoding="utf-8") as fh:
                for q in queries:
                    ranked = hits.get(by_qid_sha[q["qid"]])
                    if ranked is None:
                        continue
                    unit_of: dict[str, list[int]] = {}
                    for j, names in enumerate(q["gold"]):
                        for n in names:
                            unit_of.setdefault(n, []).append(j)
                    credited: set[int] = set()
                    seen: set[str] = set()
                    for rank, name, resolved in ranked:
                        doc = None
                        if resolved and name in unit_of:
                            fresh = [j for j in unit_of[name] if j not in credited]
                            if fresh:
                                credited.add(fresh[0])
                                doc = docnos[q["qid"]][fresh[0]]
                        elif name is not None and safe_token(name) not in seen:
                            doc = safe_token(name)
                        if doc is None or doc in seen:
                            doc = f"dup@{rank}"
                        seen.add(doc)
                        fh.write(f"{q['qid']} Q0 {doc} {rank} {k_max + 1 - rank} {tag}\n")
            paths.append(path)
    return paths


def _system_hits(
    session, config_id: int, epoch: int, corpus_id: int, shas: list[str], k_max: int
) -> dict[str, list[tuple[int, str | None, bool]]]:
    a, h = Answer.__table__, Hit.__table__
    out: dict[str, list[tuple[int, str | None, bool]]] = {}
    for chunk in _chunks(shas):
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
