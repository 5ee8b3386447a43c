"""A small database and run inputs for run round-trip tests."""

from __future__ import annotations

import json
from pathlib import Path

import benchmarks
from store.benchmarks import load_benchmark_file
from store.corpus import load_corpus
from store.db import open_database


def _small_inputs(tmp_path: Path) -> dict[str, Path]:
    """The first targets of MathlibQR and MathlibMPR (real items, real formats) and a small
    corpus of slice rows holding their gold names plus distractors: fast to load twice."""
    qr = json.loads(benchmarks.shipped_path("MathlibQR.json").read_text(encoding="utf-8"))[:20]
    mpr = json.loads(benchmarks.shipped_path("MathlibMPR.json").read_text(encoding="utf-8"))[:8]
    gold = {x["full_name"] for x in qr} | {d for x in mpr for g in x["premise_group"] for d in g["docs"]}
    lines = benchmarks.SLICE_CORPUS.read_text(encoding="utf-8").splitlines()
    keep = [ln for i, ln in enumerate(lines) if i % 40 == 0 or ".".join(json.loads(ln)["name"]) in gold]
    out = {"mathlibqr": tmp_path / "qr.json", "mathlibmpr": tmp_path / "mpr.json", "corpus": tmp_path / "corpus.jsonl"}
    out["mathlibqr"].write_text(json.dumps(qr, ensure_ascii=False), encoding="utf-8")
    out["mathlibmpr"].write_text(json.dumps(mpr, ensure_ascii=False), encoding="utf-8")
    out["corpus"].write_text("\n".join(keep) + "\n", encoding="utf-8")
    return out


def _database(url: str, inputs: dict[str, Path]):
    db = open_database(url)
    for bench in ("mathlibqr", "mathlibmpr"):
        load_benchmark_file(db, inputs[bench], name=bench, allow_modified=True)
    load_corpus(db, str(inputs["corpus"]), name="slice-part", revision="r1")
    return db
