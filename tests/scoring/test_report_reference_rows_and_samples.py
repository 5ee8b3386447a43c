"""The HTML report's issue-15 parts, from a real scored database: published reference
rows (own table, blank where unreported, dashed markers), engine-subset views, the
sampled badge, P@k shown disabled with its reason, and the overlapping-groups note."""

from __future__ import annotations

import re

import sqlalchemy as sa

from crawler.plan import sampled_texts, store_sample
from scoring.document import build_score_json
from scoring.report import render_html
from store.models import Benchmark
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)


def test_report_published_slices_badge_and_disabled_precision(cache):
    qs = bench_queries(cache, "mathlibqr")
    with cache.session() as s:
        bid = s.execute(sa.select(Benchmark.id).where(Benchmark.name == "mathlibqr")).scalar_one()
    sample = sampled_texts(cache, bid, False, 40, 1)
    store_sample(cache, engine="leanexplore", bench="mathlibqr", seed=1, texts=sample)
    answer_all(cache, make_config(cache, "full"), qs, lambda q: filler(q.id % 5) + [gold_name(q)])
    answer_all(cache, make_config(cache, "leanexplore"), [q for q in qs if q.query_sha256 in sample],
               lambda q: [gold_name(q)])
    doc = build_score_json(cache, "mathlibqr")
    assert [p["id"] for p in doc["published"]] == ["legendre-m1"]
    page = render_html(doc)
    assert 'id="published"' in page and "Legendre leaderboard, run m1" in page
    # LeanSearch v2's API row reports no R@100: a blank cell, not 0 and not a dash.
    row = re.search(r'<tr class="published-row"><td class="sys">LeanSearch v2 \(API, k ≤ 50\).*?</tr>', page).group(0)
    cells = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert "" in cells and "0.000" not in cells
    # Published rows are not in the ranked leaderboard, and are drawn dashed on the curves.
    board = page[page.index('id="leaderboard"'):page.index('id="published"')]
    assert "Qwen3-Embedding-8B" not in board
    assert page.count('class="published" cx=') >= 13
    # The sampled row: its own n, the badge; the engine-subset view is offered.
    sampled = next(s for s in doc["systems"] if s["id"] == "leanexplore")
    assert f'n={sampled["n"]} sampled' in sampled["badges"] and sampled["n"] <= 40
    assert 'class="badge sample"' in page
    assert [sl["name"] for sl in doc["slices"]] == ["engine-subset:leanexplore"]
    assert 'data-slice="engine-subset:leanexplore"' in page and 'id="slices"' in page
    full_in_slice = next(s for s in doc["slices"][0]["systems"] if s["id"] == "full")
    assert full_in_slice["n"] == sampled["n"]
    # Single-gold task: the P@k control is there, disabled, with the one-line reason.
    assert re.search(r'<input type="checkbox" data-metric="P" disabled>', page)
    assert "disabled: with one gold per query P@k is R@k / k" in page

    # The fair slice gets Table 1 instead; MathlibMPR gets Table 2 and no disabled P@k.
    fair = build_score_json(cache, "mathlibqr", subset="shared171")
    assert [p["id"] for p in fair["published"]] == ["lsv2-table1"]
    assert "LeanSearch v2 paper, Table 1" in render_html(fair)


def test_report_overlap_note_and_table2(cache):
    qs = bench_queries(cache, "mathlibmpr")
    answer_all(cache, make_config(cache, "mpr"), qs, lambda q: [u.names[0].name for u in q.gold_units])
    doc = build_score_json(cache, "mathlibmpr")
    assert [p["id"] for p in doc["published"]] == ["lsv2-table2"]
    page = render_html(doc)
    assert doc["overlapping_units"] > 0
    assert f"{doc['overlapping_units']} scored queries have premise groups that share a name" in page
    assert 'data-metric="P" disabled' not in page and 'data-metric="P"' in page
    # Table 2 reports R@10 and covered_paper@10 only; nDCG@10 is not a column of it.
    pub = page[page.index('id="published"'):]
    pub = pub[:pub.index("</section>")]
    assert "covered_paper@10" in pub and "nDCG@10" not in pub


def test_score_published_cli(cache, cache_url, tmp_path):
    import json

    from typer.testing import CliRunner

    from cli.main import app

    qs = bench_queries(cache, "mathlibqr")
    answer_all(cache, make_config(cache, "sys"), qs, lambda q: [gold_name(q)])
    runner = CliRunner()
    out = tmp_path / "s.json"
    res = runner.invoke(app, ["--db", cache_url, "score", "--bench", "mathlibqr", "--subset", "shared171", "--published",
                              "--json", str(out)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "published (reference, not ranked): LeanSearch v2 paper, Table 1 [arXiv:2605.13137]" in res.stdout
    assert "LSv2 with rerank" in res.stdout and "0.623" in res.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    (src,) = doc["published"]
    assert src["table"] == "Table 1" and src["n"] == 810 and all(r["label"] == "published" for r in src["rows"])
    # No MRR in Table 1: absent (blank), never 0.
    assert all("MRR" not in r["metrics"] for r in src["rows"])
    # The measured ranking is untouched: one measured row only.
    assert [s["id"] for s in doc["systems"]] == ["sys"]
    res = runner.invoke(app, ["--db", cache_url, "score", "--bench", "mathlibqr", "--style", "q3_nickname", "--published"])
    assert res.exit_code == 0 and "no published numbers were computed on this query set" in res.stderr
