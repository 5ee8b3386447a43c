"""`engines plot`: render real figures from a scored database and check the files
(PDF page count and size, PNG pixels not blank, SVG structure), plus the refusals."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.scoring import (  # noqa: F401  (fixtures)
    answer_all, bench_queries, cache, cache_url, filler, gold_name, make_config, prepared_cache,
)


runner = CliRunner()


@pytest.fixture(scope="module")
def scored_db(prepared_cache, tmp_path_factory):
    from store.db import open_database

    path = tmp_path_factory.mktemp("plot") / "cache.db"
    shutil.copyfile(prepared_cache, path)
    url = f"sqlite:///{path}"
    db = open_database(url)
    qs = bench_queries(db, "mathlibqr")
    answer_all(db, make_config(db, "good"), qs, lambda q: filler(q.id % 7) + [gold_name(q)])
    answer_all(db, make_config(db, "capped", result_cap=50), qs,
               lambda q: (filler(q.id % 40) + [gold_name(q)])[:50] if q.id % 3 else filler(5))
    db.dispose()
    return url


@pytest.fixture(scope="module")
def score_json(scored_db, tmp_path_factory):
    """The score document, written once by `engines score --json`; most tests plot from it."""
    path = tmp_path_factory.mktemp("plot-json") / "score.json"
    res = runner.invoke(app, ["--db", scored_db, "score", "--bench", "mathlibqr", "--json", str(path)])
    assert res.exit_code == 0, res.output
    return path


@pytest.fixture
def scored(scored_db):
    return scored_db


def test_pdf_png_svg_render(scored, score_json, tmp_path):
    from matplotlib.image import imread

    pdf, png, svg = tmp_path / "fig.pdf", tmp_path / "fig.png", tmp_path / "fig.svg"
    # One straight from the database, the others from the score JSON.
    res = runner.invoke(app, ["--db", scored, "plot", "--bench", "mathlibqr", "--metric", "ndcg", "--out", str(pdf)])
    assert res.exit_code == 0, res.output
    for path, metric in ((png, "recall"), (svg, "ndcg")):
        res = runner.invoke(app, ["plot", "--from-json", str(score_json), "--metric", metric, "--out", str(path)])
        assert res.exit_code == 0, res.output
        assert res.stdout.strip() == str(path)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and 5_000 < len(data) < 500_000
    assert len(re.findall(rb"/Type\s*/Page[^s]", data)) == 1  # one page
    assert b"/FontFile2" in data  # TrueType embedded (pdf.fonttype 42)
    img = imread(png)
    h, w = img.shape[:2]
    assert w == pytest.approx(3.4 * 300, abs=4)  # one column at 300 dpi
    rgb = img[..., :3]
    ink = (rgb.sum(axis=2) < 2.9).mean()
    assert 0.01 < ink < 0.6  # not blank, not a solid fill
    # The Okabe-Ito blue of the first row is drawn.
    blue = ((abs(rgb[..., 0] - 0x00 / 255) < 0.05) & (abs(rgb[..., 1] - 0x72 / 255) < 0.05) & (abs(rgb[..., 2] - 0xB2 / 255) < 0.05))
    assert blue.sum() > 50
    root = ET.fromstring(svg.read_text(encoding="utf-8"))
    assert root.tag.endswith("svg") and len(list(root.iter("{http://www.w3.org/2000/svg}path"))) > 20
    # Same document, same bytes (no timestamps in the file).
    again = tmp_path / "again.svg"
    runner.invoke(app, ["plot", "--from-json", str(score_json), "--out", str(again)])
    assert again.read_bytes() == svg.read_bytes()


def test_published_rows_are_drawn_on_full_mathlibqr(score_json, tmp_path):
    import json

    from scoring.plot import plot_curves
    from scoring.reference_rows import attach

    doc = attach(json.loads(score_json.read_text(encoding="utf-8")))
    assert [s["id"] for s in doc["published"]] == ["legendre-m1"]
    out = plot_curves(doc, "recall", tmp_path / "pub.svg")
    text = out.read_text(encoding="utf-8")
    assert "stroke-dasharray" in text
    without = dict(doc, published=[])
    plot_curves(without, "recall", tmp_path / "nopub.svg")
    assert len(text) > len((tmp_path / "nopub.svg").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--metric", "precision", "--out", "{d}/p.pdf"], "P@k is not drawn on single-gold tasks"),
        (["--metric", "auc", "--out", "{d}/p.pdf"], "--metric 'auc'"),
        (["--out", "{d}/p.jpg"], "must end in .pdf, .png, .svg"),
        (["--out", "{d}/missing/p.pdf"], "does not exist"),
    ],
)
def test_refusals_are_one_line(score_json, tmp_path, args, message):
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["plot", "--from-json", str(score_json), *args])
    assert res.exit_code == 1 and res.stderr.startswith("error: ") and message in res.stderr, res.output
    assert "Traceback" not in res.output and not list(tmp_path.glob("*.pdf"))
