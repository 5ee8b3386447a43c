"""The HTML report renderer against synthetic score JSON of the engines.score/1 shape.

``synthetic_score`` builds a score file from per-query gold positions the way the scorer
does (R@k, nDCG@k, curves with bootstrap bands), so the rendered numbers can be checked
against values computed here independently of the renderer.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from scoring.report import render_html, render_report
from store.errors import InputError
from tests.support.report import K_MAX, synthetic_score


class _Collector(HTMLParser):
    """Collect tags with their attributes and the text inside chosen elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):  # noqa: ANN001
        self.text.append(data)


def parse(page: str) -> _Collector:
    c = _Collector()
    c.feed(page)
    return c


def test_report_files_and_json_round_trip(tmp_path):
    score = synthetic_score()
    html_path = render_report(score, tmp_path / "out")
    assert html_path == tmp_path / "out" / "index.html"
    assert json.loads((tmp_path / "out" / "report.json").read_text("utf-8")) == score
    assert not list((tmp_path / "out").glob(".*.tmp"))
    page = html_path.read_text("utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # nothing loaded from the network
    assert not re.search(r"""(src|href)=["']https?:""", page)
    assert "@import" not in page


def test_leaderboard_rows_sorted_with_values_and_cis():
    score = synthetic_score()
    page = render_html(score)
    rows = re.findall(r'<tr class="system-row" data-system="([^"]+)">(.*?)</tr>', page)
    assert [r[0] for r in rows] == [
        s["id"] for s in sorted(score["systems"], key=lambda s: -s["metrics"]["nDCG@10"]["value"])
    ]
    for sid, row in rows:
        s = next(x for x in score["systems"] if x["id"] == sid)
        v = s["metrics"]["nDCG@10"]
        assert f"{v['value']:.3f}" in row
        assert f"[{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]" in row
        assert f'<td class="num">{s["n"]}</td>' in row


def test_capped_metrics_render_as_undefined_not_zero():
    page = render_html(synthetic_score())
    row = re.search(r'data-system="leansearch:e0">(.*?)</tr>', page).group(1)
    undef = re.findall(r'<td class="num undef" data-v="" title="([^"]+)">—</td>', row)
    # of the table's metrics only R@100 lies above the cap of 50
    assert len(undef) == 1 and "above k=50" in undef[0]
    assert "k≤50" in row


def test_badges_incomplete_licence_and_banner():
    score = synthetic_score(unanswered={"bm25": ("Q1_q1c_natural",)})
    page = render_html(score)
    bm25 = re.search(r'data-system="bm25:e0">(.*?)</tr>', page).group(1)
    assert 'class="badge warn">incomplete<' in bm25
    assert '<td class="num alert">1</td>' in bm25
    dense = re.search(r'data-system="dense:e0">(.*?)</tr>', page).group(1)
    assert "licence: CC-BY-NC-4.0" in dense
    assert page.count("DEVELOPMENT SLICE — NOT A RESULT") >= 2  # title/banner/footer, as the score table
    assert 'class="banner"' in page
    no_banner = render_html(synthetic_score(banner=None))
    assert 'class="banner"' not in no_banner


def test_data_text_is_escaped():
    score = synthetic_score()
    score["systems"][0]["id"] = '<img src=x onerror="alert(1)">'
    score["queries"][0]["gold"] = [["<script>alert(2)</script>"]]
    page = render_html(score)
    assert "<img src=x" not in page
    assert "<script>alert(2)" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "query 0 about &lt;b&gt;lattices&lt;/b&gt; &amp; &quot;joins&quot;" in page
    # the only <script> element is ours
    assert [t for t, _ in parse(page).tags].count("script") == 1


def test_curves_have_a_line_and_band_per_system_and_stop_at_cap():
    score = synthetic_score()
    page = render_html(score)
    tags = parse(page).tags
    svgs = [a for t, a in tags if t == "svg"]
    assert {a["data-metric"] for a in svgs} == {"R", "nDCG"}
    lines = [a for t, a in tags if t == "path" and a.get("class") == "line"]
    bands = [a for t, a in tags if t == "polygon" and a.get("class") == "band"]
    assert len(lines) == 2 * len(score["systems"])
    assert len(bands) == 2 * len(score["systems"])
    ls = [a for a in lines if a["data-system"] == "leansearch:e0"]
    full = [a for a in lines if a["data-system"] == "bm25:e0"]
    # the capped curve has 50 points, the full one 200
    assert all(a["d"].count("L") == 49 for a in ls)
    assert all(a["d"].count("L") == K_MAX - 1 for a in full)
    # y coordinate of R@1 for bm25 matches its value on the 0..1 axis (top 26, height 274)
    bm25 = next(s for s in score["systems"] if s["engine"] == "bm25")
    y0 = float(full[0]["d"].split()[0].split(",")[1])
    assert y0 == pytest.approx(26 + 274 * (1 - bm25["curves"]["R"][0]), abs=0.06)


def test_multi_gold_curves_and_pr_are_drawn_when_present():
    score = synthetic_score()
    for s in score["systems"]:
        s["curves"]["P"] = [v / k if v is not None else None for v, k in zip(s["curves"]["R"], s["curves"]["k"])]
        s["pr"] = {"recall": [i / 10 for i in range(11)], "precision": [1 - i / 20 for i in range(11)]}
    metrics = {a["data-metric"] for t, a in parse(render_html(score)).tags if t == "svg"}
    assert metrics == {"R", "nDCG", "P", "PR"}


def test_breakdowns_by_style_kind_difficulty():
    score = synthetic_score()
    page = render_html(score)
    for dim in ("style", "kind", "difficulty"):
        m = re.search(rf'<table class="breakdown" data-dim="{dim}">(.*?)</table>', page)
        assert m, dim
        for s in score["systems"]:
            for v, cell in s["breakdowns"][dim].items():
                assert f">{v}<" in m.group(1)
                assert f"nDCG@10 {cell['nDCG@10']:.3f}, R@10 {cell['R@10']:.3f}, n {cell['n']}" in m.group(1)


def test_query_explorer_ranks_and_states():
    score = synthetic_score()
    page = render_html(score)
    body = re.search(r'<table id="queries-table".*?<tbody>(.*?)</tbody>', page).group(1)
    rows = re.findall(r"<tr class=\"q\" id=\"q-[^\"]+\" data-style=\"[^\"]*\" data-state=\"(\w+)\">(.*?)</tr>", body)
    assert len(rows) == len(score["queries"])
    order = sorted(score["systems"], key=lambda s: -s["metrics"]["nDCG@10"]["value"])
    for (state, row), q in zip(rows, score["queries"]):
        assert f'<td class="qid">{q["qid"]}</td>' in row
        ranks = re.findall(r'<td class="num rank (\w+)" data-v="(\d*)">([^<]*)</td>', row)
        assert len(ranks) == len(order)
        if q["qid"] == "Q3_q1a_lean":
            assert state == "dropped" and all(c == "na" and v == "" for c, v, _ in ranks)
            continue
        found = 0
        for (cls, v, text), s in zip(ranks, order):
            p = s["per_query"][q["qid"]]["positions"][0]
            assert text == (str(p) if p else "—")
            assert v == (str(p) if p else "")  # the sort key: missing sorts last
            found += p is not None
        assert state == ("none" if found == 0 else "all" if found == len(order) else "some")


def test_methodology_from_json_constants():
    score = synthetic_score()
    page = render_html(score, json_sha256="f" * 64)
    meth = re.search(r'<section id="methodology">(.*)</section>', page, re.S).group(1)
    assert "<dt>k_max</dt><dd>200 " in meth
    assert "1000 resamples of the query set, seed 20260101" in meth
    assert "95% percentile interval" in meth
    assert "mathlib-slice@028964f2c6f0, 11651 rows" in meth
    assert "renderer_hash = r3nd3r" in meth
    assert "f" * 64 in meth


def test_comparisons_table():
    score = synthetic_score()
    score["comparisons"].append({"a": "leansearch:e0", "b": "bm25:e0", "metric": "R@1", "diff": 0.2,
                                 "ci": [0.1, 0.3], "p": 1 / 1001})
    page = render_html(score)
    table = re.search(r'<table class="cmp">(.*?)</table>', page).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    assert len(rows) == 2
    assert ">0.012<" in rows[0] and "[-0.010, 0.030]" in rows[0] and ">0.2100<" in rows[0]
    assert "≤ 0.0010" in rows[1]  # the bootstrap floor, 1 / (1000 + 1)
    assert "No comparisons" not in page and 'href="#comparisons"' in page
    score["comparisons"] = []
    assert 'id="comparisons"' not in render_html(score)


def test_methodology_flags_constants_that_differ_from_the_code():
    from scoring.bootstrap import RESAMPLES, SEED

    score = synthetic_score()
    score["bootstrap"]["seed"] = SEED
    score["bootstrap"]["resamples"] = RESAMPLES
    assert "other constants than this code" not in render_html(score)
    score["bootstrap"]["seed"] = SEED + 1
    page = render_html(score)
    assert f"seed {SEED + 1} (code: {SEED})" in page and "other constants than this code" in page


def test_wrong_schema_is_refused():
    score = synthetic_score()
    score["schema"] = "something/else"
    with pytest.raises(InputError, match="schema"):
        render_html(score)


def test_empty_systems_still_render():
    score = synthetic_score(systems=())
    page = render_html(score)
    assert "no data" in page
    assert '<tr class="system-row"' not in page
    assert "<h1>" in page
