"""Issue 22 item 6: one way to name a system everywhere (score --system/--compare/--snapshot,
report, plot, drift): its id or label, its engine name or display name when that picks one
system, or a config-hash prefix — case-insensitive; an ambiguous name is one clear line
listing the candidates. Real SQLite cache with the shipped benchmarks and the slice."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from engines.base import config_hash
from cli.main import app
from scoring.results import score
from store.db import open_database
from store.errors import InputError
from store.writes import ensure_config
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache_url, filler, gold_name, prepared_cache,
)

runner = CliRunner()


def _config(db, engine: str, label: str) -> tuple[int, str]:
    h = config_hash({"engine": engine, "label": label})
    with db.session() as s, s.begin():
        return ensure_config(s, engine=engine, endpoint_version="v1", params={"label": label}, config_hash=h,
                             label=label).id, h


def _ranking(seed: int):
    r = random.Random(seed)

    def ranking(q):
        names = filler(r.randint(0, 20), tag=str(q.id))
        if r.random() < 0.6:
            names.insert(r.randrange(len(names) + 1), gold_name(q))
        return names
    return ranking


@pytest.fixture
def standins(cache_url):
    """The demo's naming: stand-in rows labelled "ENGINE (stand-in)"."""
    db = open_database(cache_url)
    qs = bench_queries(db, "mathlibmpr")
    hashes = {}
    for i, engine in enumerate(("leanfinder", "leansearch")):
        cid, hashes[engine] = _config(db, engine, f"{engine} (stand-in)")
        answer_all(db, cid, qs, _ranking(i))
    yield db, cache_url, hashes, qs
    db.dispose()


def _pair(doc) -> tuple[str, str]:
    (c, *_), = [doc["comparisons"]]
    return c["a"], c["b"]


def test_compare_takes_labels_engine_names_display_names_and_hash_prefixes(standins) -> None:
    db, _, hashes, _ = standins
    want = ("leanfinder (stand-in)", "leansearch (stand-in)")
    for a, b in [("Lean Finder", "LeanSearch"), ("leanfinder", "leansearch"), ("LEANFINDER (STAND-IN)", "leansearch (stand-in)"),
                 (hashes["leanfinder"][:8], hashes["leansearch"][:10].upper()), ("lean-finder", " leanSearch ")]:
        doc = score(db, "mathlibmpr", compare=(a, b), resamples=50).to_json()
        assert _pair(doc) == want, (a, b)
    only = score(db, "mathlibmpr", systems=["Lean Finder"], resamples=50).to_json()
    assert [s["id"] for s in only["systems"]] == ["leanfinder (stand-in)"]


def test_readme_compare_example_runs_and_snapshot_takes_the_same_names(standins, tmp_path) -> None:
    db, url, _, _ = standins
    res = runner.invoke(app, ["--db", url, "score", "--bench", "mathlibmpr", "--compare", "Lean Finder", "LeanSearch"])
    assert res.exit_code == 0, res.output
    assert "leanfinder (stand-in)" in res.stdout and "leansearch (stand-in)" in res.stdout
    names = tmp_path / "names.txt"
    names.write_text("Nat.succ_le_iff\n", encoding="utf-8")
    doc = score(db, "mathlibmpr", snapshots={"lean finder": str(names)}, resamples=50).to_json()
    badges = {s["id"]: s["badges"] for s in doc["systems"]}
    assert badges["leanfinder (stand-in)"] != badges["leansearch (stand-in)"]


def test_a_name_that_picks_two_systems_lists_them(standins) -> None:
    db, url, _, qs = standins
    cid, _ = _config(db, "leansearch", "leansearch@20")
    answer_all(db, cid, qs, _ranking(7))
    with pytest.raises(InputError) as err:
        score(db, "mathlibmpr", compare=("LeanSearch", "Lean Finder"), resamples=50)
    msg = str(err.value)
    assert "'LeanSearch' names 2 systems" in msg and "leansearch (stand-in)" in msg and "leansearch@20" in msg
    res = runner.invoke(app, ["--db", url, "score", "--bench", "mathlibmpr", "--compare", "leansearch", "leanfinder"])
    assert res.exit_code == 1
    assert len(res.stderr.strip().splitlines()) == 1 and "names 2 systems" in res.stderr
    # Its label still picks one.
    assert _pair(score(db, "mathlibmpr", compare=("leansearch@20", "lean finder"), resamples=50).to_json())[0] == "leansearch@20"
    res = runner.invoke(app, ["--db", url, "score", "--bench", "mathlibmpr", "--compare", "ghost", "leanfinder"])
    assert res.exit_code == 1 and "--compare: no system 'ghost'" in res.stderr


def test_drift_and_plot_resolve_names_the_same_way(standins, tmp_path) -> None:
    from scoring.drift import find_config

    db, url, hashes, _ = standins
    with db.session() as s:
        for spec in ("Lean Finder", "leanfinder", "LEANFINDER (stand-in)", hashes["leanfinder"][:7]):
            assert find_config(s, spec).label == "leanfinder (stand-in)", spec
    pytest.importorskip("matplotlib")
    out = tmp_path / "f.svg"
    res = runner.invoke(app, ["--db", url, "plot", "--bench", "mathlibmpr", "--system", "Lean Finder", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 0
    # Item 9: the legend is the table's label, "(stand-in)" included.
    from scoring.plot import figure

    doc = score(db, "mathlibmpr", systems=["Lean Finder", "leansearch"], resamples=50).to_json()
    fig = figure(doc, "ndcg")
    legend = sorted(t.get_text() for t in fig.legends[0].get_texts())
    assert legend == ["leanfinder (stand-in)", "leansearch (stand-in)"]
