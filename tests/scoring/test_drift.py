"""engines drift and epoch selection in engines score, on a real two-epoch crawl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cli.main import app
from scoring.drift import drift
from scoring.rbo import jaccard_at, rbo_ext
from scoring.results import score
from store.db import open_database
from store.models import Epoch
from tests.support.epochs import N_MPR, two_epochs  # noqa: F401 (fixture)


@pytest.fixture
def src(two_epochs, tmp_path: Path):  # noqa: F811
    db = open_database(two_epochs.copy(tmp_path / "src.db"))
    yield db
    db.dispose()


def _lists(db, epoch: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with db.engine.connect() as conn:
        for text, name in conn.exec_driver_sql(
            "SELECT query_text, coalesce(normalized_name, returned_name) FROM v_hits "
            f"WHERE engine = 'leansearch' AND epoch = {epoch} ORDER BY query_text, rank"
        ):
            out.setdefault(text, []).append(name)
    return out


def test_epochs_carry_labels_and_first_send(src) -> None:
    with src.session() as s:
        rows = {e.epoch: e for e in s.execute(sa.select(Epoch)).scalars()}
    assert {n: e.label for n, e in rows.items()} == {0: "2026-11", 1: "2026-12"}
    assert rows[0].started_at is not None and rows[0].started_at < rows[1].started_at


def test_drift_figures_against_the_hits(src) -> None:
    doc = drift(src, "leansearch", "mathlibmpr")
    assert doc["from"]["label"] == "2026-11" and doc["to"]["label"] == "2026-12"
    assert doc["n_common"] == N_MPR and doc["only_from"] == doc["only_to"] == 0
    sdoc = score(src, "mathlibmpr", epochs="all").to_json()
    assert doc["n_scored"] == len(sdoc["queries"]) > 0  # gold in the slice corpus: the metric queries
    before, after = _lists(src, 0), _lists(src, 1)
    rows = doc["per_query"]
    for r in rows:  # every per-query figure recomputed from v_hits
        a, b = before.get(r["text"], []), after.get(r["text"], [])
        assert r["rbo"] == pytest.approx(rbo_ext(a, b, 0.9), abs=1e-12)
        assert r["jaccard@10"] == pytest.approx(jaccard_at(a, b, 10))
        assert r["top1_changed"] == (a[:1] != b[:1])
        assert r["top_before"] == a[:5] and r["top_after"] == b[:5]
    o = doc["overall"]
    rbos = [r["rbo"] for r in rows]
    assert o["rbo"]["value"] == pytest.approx(np.mean(rbos))
    assert o["rbo"]["ci"][0] <= o["rbo"]["value"] <= o["rbo"]["ci"][1]
    assert 0 < o["top1_changed"] < 1 and o["top1_changed"] == sum(r["top1_changed"] for r in rows) / N_MPR
    assert 0.0 < o["rbo"]["value"] < 1.0  # the re-index changed something, not everything
    # The paired differences are the scorer's own numbers for the two epochs.
    by_epoch = {s["epoch"]: s for s in sdoc["systems"]}
    for m in ("nDCG@10", "R@10", "MRR"):
        d = o["paired"][m]
        want = by_epoch[1]["metrics"][m]["value"] - by_epoch[0]["metrics"][m]["value"]
        assert d["diff"] == pytest.approx(want, abs=1e-12)
        assert d["ci"][0] <= d["diff"] <= d["ci"][1] and 0 < d["p"] <= 1
    # Gold positions are the scorer's positions (earliest gold unit).
    pq = {qid: v for qid, v in by_epoch[0]["per_query"].items()}
    assert sum(r["scored"] for r in rows) == doc["n_scored"]
    for r in rows:
        if not r["scored"]:
            assert r["gold_before"] is None and r["gold_after"] is None
            continue
        ps = [p for p in pq[r["qid"]]["positions"] if p is not None]
        assert r["gold_before"] == (min(ps) if ps else None)
    worst = doc["most_changed"][0]
    assert next(r for r in rows if r["qid"] == worst)["rbo"] == min(rbos)


def test_drift_cli_and_errors(src, tmp_path: Path) -> None:
    url = str(src.engine.url)
    runner = CliRunner()
    out = tmp_path / "drift.json"
    res = runner.invoke(app, ["--db", url, "drift", "leansearch", "--bench", "mathlibmpr", "--from", "2026-11",
                              "--to", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "mean RBO" in res.output and "changed most" in res.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "engines.drift/1" and len(doc["per_query"]) == N_MPR
    res = runner.invoke(app, ["--db", url, "drift", "leansearch", "--bench", "mathlibmpr", "--from", "2025-01"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1].startswith("error: --from: no epoch '2025-01' (epochs: 0 (2026-11), 1 (2026-12))")
    res = runner.invoke(app, ["--db", url, "drift", "loogle", "--bench", "mathlibmpr"])
    assert res.exit_code == 1 and "no engine configuration 'loogle'" in res.output


def test_score_uses_the_newest_epoch_and_names_it(src) -> None:
    doc = score(src, "mathlibmpr").to_json()
    assert [(s["epoch"], s["epoch_label"]) for s in doc["systems"]] == [(1, "2026-12")]
    old = score(src, "mathlibmpr", epochs="2026-11").to_json()
    assert [(s["epoch"], s["epoch_label"]) for s in old["systems"]] == [(0, "2026-11")]
    assert len(score(src, "mathlibmpr", epochs="all").to_json()["systems"]) == 2
    res = CliRunner().invoke(app, ["--db", str(src.engine.url), "score", "--bench", "mathlibmpr", "--epoch", "0"])
    assert res.exit_code == 0, res.output
    assert "0 (2026-11)" in res.output and "2026-12" not in res.output
    res = CliRunner().invoke(app, ["--db", str(src.engine.url), "score", "--bench", "mathlibmpr", "--epoch", "7"])
    assert res.exit_code == 1 and "error: --epoch '7': no system has that epoch" in res.output


def test_refresh_if_older_opens_an_epoch_only_when_due(src, two_epochs) -> None:  # noqa: F811
    import datetime as dt

    from crawler.crawl import CrawlOptions, crawl_engines

    opts = CrawlOptions(engines=["leansearch"], bench="mathlibmpr", urls={"leansearch": two_epochs.base_url},
                        refresh_if_older=30 * 86400.0)
    assert crawl_engines(src, opts, "w")[0].epoch == 1  # epoch 1 began just now
    with src.session() as s, s.begin():
        s.get(Epoch, (1, 1)).started_at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=31)
    assert crawl_engines(src, opts, "w")[0].epoch == 2  # older than 30 days: epoch 2 opens
    assert crawl_engines(src, opts, "w")[0].epoch == 2  # and stays current (it has no sends yet)


def test_report_has_a_drift_section_linked_to_the_explorer(src, tmp_path: Path) -> None:
    from scoring.document import build_score_json
    from scoring.report import render_html

    doc = build_score_json(src, "mathlibmpr")
    assert len(doc["drift"]) == 1 and doc["drift"][0]["to"]["label"] == "2026-12"
    html = render_html(doc)
    assert '<section id="drift"><h2>Drift</h2>' in html and '<a href="#drift">Drift</a>' in html
    scored = [q["qid"] for q in doc["queries"]]
    for qid in scored:  # every scored query links to its explorer row, which exists
        assert f'<a href="#q-{qid}">{qid}</a>' in html and f'id="q-{qid}"' in html
    import re

    table = html[html.index('class="queries sortable drift"'):]
    table = table[:table.index("</table>")]
    order = re.findall(r"<tr><td>(?:<a href=\"#q-[^\"]+\">)?(mathlibmpr_[^<]+)<", table)
    rows = doc["drift"][0]["per_query"]
    assert order == [r["qid"] for r in sorted(rows, key=lambda r: (r["rbo"], r["qid"]))]  # most changed first
    assert order[0] == doc["drift"][0]["most_changed"][0]
    no_drift = dict(doc)
    no_drift.pop("drift")
    assert 'id="drift"' not in render_html(no_drift)
    res = CliRunner().invoke(app, ["--db", str(src.engine.url), "report", "--bench", "mathlibmpr",
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert '<section id="drift">' in (tmp_path / "r" / "index.html").read_text()


def test_crawl_epoch_options_are_checked(src) -> None:
    res = CliRunner().invoke(app, ["--db", str(src.engine.url), "crawl", "leansearch", "--bench", "mathlibmpr",
                                   "--refresh-if-older", "soon"])
    assert res.exit_code == 1 and "error: cannot parse duration 'soon'" in res.output


def _copy_epoch0_into_epoch1(db, repeat_in: set[str]) -> dict[str, str]:
    """Make every epoch-1 list the epoch-0 list again, except that the queries in
    ``repeat_in`` (texts) repeat their first hit in slot 2 (everything after moves down one,
    as a server that repeats hits does). Returns text → qid of the changed queries' texts."""
    from store.models import Answer, Hit, Position, Query

    with db.session() as s, s.begin():
        s.execute(sa.delete(Position))  # cached gold positions of the lists being rewritten
        ans = {(a.query_sha256, a.epoch): a for a in s.execute(sa.select(Answer).where(~Answer.superseded)).scalars()}
        texts = {q.query_sha256: q.text for q in s.execute(sa.select(Query)).scalars()}
        for (sha, epoch), a1 in ans.items():
            a0 = ans.get((sha, 0))
            if epoch != 1 or a0 is None:
                continue
            s.execute(sa.delete(Hit).where(Hit.answer_id == a1.id))
            old = list(s.execute(sa.select(Hit).where(Hit.answer_id == a0.id).order_by(Hit.rank)).scalars())
            if texts.get(sha) in repeat_in and old:
                old = old[:1] + old
            for rank, h in enumerate(old, 1):
                s.add(Hit(answer_id=a1.id, rank=rank, name=h.name, normalized_name=h.normalized_name, raw=h.raw,
                          resolved_corpus_id=h.resolved_corpus_id, declaration_id=h.declaration_id,
                          resolution=h.resolution))
    return texts


def test_drift_over_first_occurrences_lists_only_changed_queries(src) -> None:
    """Issue 22 item 4: a server that repeats a hit. Every epoch-1 list is its epoch-0 list,
    except two queries that repeat their top hit in slot 2. Only those two changed."""
    doc0 = drift(src, "leansearch", "mathlibmpr")
    unscored = [r for r in doc0["per_query"] if not r["scored"] and r["n_before"] >= 3]
    assert len(unscored) >= 2
    changed = {r["text"] for r in unscored[:2]}
    _copy_epoch0_into_epoch1(src, changed)
    doc = drift(src, "leansearch", "mathlibmpr")
    rows = {r["qid"]: r for r in doc["per_query"]}
    want = sorted(r["qid"] for r in rows.values() if r["text"] in changed)
    assert sorted(doc["most_changed"]) == want  # the unchanged 67 are not listed
    for r in rows.values():
        if r["text"] in changed:  # the repeat took slot 2: the list changed, RBO below 1
            assert r["changed"] and r["top10_changed"] and r["rbo"] < 1.0 and not r["top1_changed"]
            assert r["jaccard@10"] < 1.0  # the old 10th name fell out of the top 10
        else:  # identical lists: exactly 1, not the float sum's 0.9999999999999997
            assert r["rbo"] == 1.0 and not r["changed"] and not r["top10_changed"] and r["jaccard@10"] == 1.0
    # No scored query changed: each paired difference is zero on every query → 0, p = 1.
    for m, d in doc["overall"]["paired"].items():
        assert d["diff"] == 0.0 and d["ci"] == [0.0, 0.0] and d["p"] == 1.0, m
    res = CliRunner().invoke(app, ["--db", str(src.engine.url), "drift", "leansearch", "--bench", "mathlibmpr"])
    assert res.exit_code == 0, res.output
    table = res.output[res.output.index("changed most"):]
    assert sorted(re.findall(r"(mathlibmpr_\w+)", table)) == want
    line = next(x for x in res.output.splitlines() if "Δ MRR" in x)
    assert re.search(r"│\s+0\s+│\s+\[0, 0\]\s+│\s+1\s+│", line), line
    assert "-0.000" not in res.output and "+0.000" not in res.output


def test_changed_queries_are_ordered_by_rbo_then_gold_move() -> None:
    from scoring.drift import compare_lists, first_occurrences, rank_changed

    x = list("abcdefghijkl")
    assert first_occurrences(["a", "b", "a", "c"])[2] != "a"
    # A repeat that makes the distinct list a prefix of the other is still a change (the
    # extrapolated RBO of a deduplicated prefix would be exactly 1).
    short = compare_lists(x[:4], ["a", "a", "b", "c"])
    assert short["changed"] and short["rbo"] < 1.0
    same = compare_lists(x * 1, list(x))
    assert same == {"rbo": 1.0, "jaccard@10": 1.0, "top1_changed": False, "top10_changed": False, "changed": False}
    assert compare_lists(["a", "a"], ["a", "a"])["rbo"] == 1.0  # the same repeat in the same slot: no change
    rows = [
        {"qid": "q1", "rbo": 0.5, "gold_before": 1, "gold_after": 2, "changed": True},
        {"qid": "q2", "rbo": 0.5, "gold_before": 1, "gold_after": 9, "changed": True},
        {"qid": "q3", "rbo": 0.5, "gold_before": None, "gold_after": 4, "changed": True},
        {"qid": "q4", "rbo": 0.2, "gold_before": None, "gold_after": None, "changed": True},
        {"qid": "q5", "rbo": 1.0, "gold_before": None, "gold_after": None, "changed": False},
    ]
    assert [r["qid"] for r in rank_changed(rows)] == ["q4", "q3", "q2", "q1"]
