"""Issue 22 items 7 and 9 (report parts), from a real scored database: published reference
rows only with --published (like `engines score`), never drawn through an empty chart's
"no data"; dropped queries (gold not in the corpus) are rows of the explorer, marked."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from cli.main import app
from scoring.reference_rows import attach
from scoring.report import curve_svg, render_html
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)

runner = CliRunner()


def _populate(cache) -> None:
    qs = bench_queries(cache, "mathlibqr")
    answer_all(cache, make_config(cache, "full"), qs, lambda q: filler(q.id % 5) + [gold_name(q)])


def test_report_shows_published_rows_only_when_asked(cache, cache_url, tmp_path) -> None:
    _populate(cache)
    res = runner.invoke(app, ["--db", cache_url, "report", "--bench", "mathlibqr", "--out", str(tmp_path / "plain")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "plain" / "index.html").read_text("utf-8")
    assert 'id="published"' not in page and 'class="published"' not in page
    assert json.loads((tmp_path / "plain" / "report.json").read_text("utf-8"))["published"] == []
    res = runner.invoke(app, ["--db", cache_url, "report", "--bench", "mathlibqr", "--published",
                              "--out", str(tmp_path / "pub")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "pub" / "index.html").read_text("utf-8")
    assert 'id="published"' in page and page.count('class="published" cx=') >= 13
    # --from-json follows the same rule: a file carrying published rows renders them only with --published.
    src = tmp_path / "pub" / "report.json"
    res = runner.invoke(app, ["--db", cache_url, "report", "--from-json", str(src), "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    assert 'class="published"' not in (tmp_path / "again" / "index.html").read_text("utf-8")
    res = runner.invoke(app, ["--db", cache_url, "report", "--from-json", str(src), "--published",
                              "--out", str(tmp_path / "again2")])
    assert 'class="published"' in (tmp_path / "again2" / "index.html").read_text("utf-8")


def test_an_empty_chart_has_no_published_marks() -> None:
    doc = attach({"benchmark": {"name": "mathlibqr"}, "subset": None, "scope": {}, "profile": "main"})
    assert doc["published"]  # Legendre m1 applies to full MathlibQR
    svg = curve_svg([], {}, "R", "R@k", 200, doc["published"])
    assert "no data" in svg and 'class="published"' not in svg


def test_dropped_queries_are_explorer_rows(cache, tmp_path) -> None:
    from scoring.document import build_score_json

    _populate(cache)
    doc = build_score_json(cache, "mathlibqr", published=False)
    dropped = doc["scope"]["dropped_qids"]
    assert dropped and [q["qid"] for q in doc["dropped_queries"]] == sorted(dropped, key=dropped.index)
    page = render_html(doc)
    rows = re.findall(r'<tr class="q" id="q-([^"]+)" data-style="[^"]*" data-state="dropped">', page)
    assert sorted(rows) == sorted(dropped)
    first = next(q for q in doc["dropped_queries"] if q["qid"] == dropped[0])
    row = page[page.index(f'id="q-{dropped[0]}"'):]
    row = row[:row.index("</tr>")]
    assert 'class="badge drop"' in row and first["gold"][0][0].split(".")[-1] in row
    assert f'{len(doc["queries"]) + len(dropped)} queries' in page  # the filter's count includes them
