"""The report page: :func:`render_html` puts the sections together, :func:`render_report`
writes the page and its score JSON side by side.

The order of the rows, their labels, their colours and the slice banner come from
:mod:`scoring.view` (the score table's rules); the styles and the filter/sort script are
the package files ``assets/report.css`` and ``assets/report.js``, inlined into the page.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from scoring import view
from scoring.report.charts import curves
from scoring.report.common import TABLE_METRICS, e
from scoring.report.drift import render_drift
from scoring.report.explorer import explorer, with_dropped
from scoring.report.methodology import methodology
from scoring.report.tables import breakdowns, comparisons, leaderboard, published, slices

SCHEMA = "engines.score/1"


@lru_cache(maxsize=None)
def asset(name: str) -> str:
    """An asset file's text as the page inlines it (``report.css``, ``report.js``)."""
    return "\n" + files("scoring.report").joinpath("assets", name).read_text(encoding="utf-8")


def _overlap_note(score: dict[str, Any]) -> str:
    n = score.get("overlapping_units") or 0
    if not n:
        return ""
    return (
        f'<p class="note overlap">{e(n)} scored queries have premise groups that share a name. There, P@k, nDCG and '
        "MAP credit each returned row to at most one group (maximum matching); R@k and Covered@k count every group "
        "a row belongs to (docs/METHODOLOGY.md, “Units that share a returned row”).</p>"
    )


def _order_notes(systems: list[dict[str, Any]], scope: dict[str, Any]) -> str:
    """Why a row sits after the ranked ones (its sort metric undefined), and the scoring
    conventions a reader must know to compare the figures (--uncovered, --answered-by)."""
    out = [f'<p class="note order">{e(view.label(s))} is {e(s["order_note"])}.</p>'
           for s in systems if s.get("order_note")]
    if scope.get("uncovered") == "zero":
        out.append(f'<p class="note uncovered">--uncovered zero: {e(len(scope.get("uncovered_qids") or []))} '
                   "queries whose gold is not in the corpus stay in n, scored 0 by every row (the methodology "
                   "drops them).</p>")
    if scope.get("answered_by"):
        ab = scope["answered_by"]
        out.append(f'<p class="note answered">Scored on the {e(ab.get("texts"))} query texts '
                   f'{e(ab.get("system"))} answered (--answered-by).</p>')
    return "".join(out)


def render_html(score: dict[str, Any], *, json_sha256: str = "") -> str:
    """The whole page as a string (no I/O)."""
    if score.get("schema") != SCHEMA:
        from store.errors import InputError

        raise InputError(f"score file has schema {score.get('schema')!r}, expected {SCHEMA!r}; re-run engines score")
    order_by = view.headline(score)
    systems = view.ranked(score.get("systems") or [], order_by)
    colours = view.colours(systems)
    queries = score.get("queries") or []
    bench = score.get("benchmark") or {}
    corpus = score.get("corpus") or {}
    banner = view.banner(score)
    kmax = int(score.get("k_max") or 200)
    ci = (score.get("bootstrap") or {}).get("ci")
    ci_label = f"{ci * 100:g}%" if isinstance(ci, (int, float)) and 0 < ci <= 1 else "95%"
    title = f"{bench.get('name', '?')} — search engine leaderboard"
    subtitle = (
        f"{bench.get('task') or ''} · corpus {corpus.get('name')}@{corpus.get('revision')} · "
        f"{bench.get('n_queries')} queries"
        + (f" · subset {score['subset']}" if score.get("subset") else "")
        + f" · generated {score.get('generated_at') or ''}"
    )
    banner_html = f'<div class="banner" role="alert">⚠ {e(banner)}</div>' if banner else ""
    compared = comparisons(score.get("comparisons") or [], (score.get("bootstrap") or {}).get("resamples"))
    nav = ['<a href="#leaderboard">Leaderboard</a>', '<a href="#curves">Curves</a>', '<a href="#breakdowns">Breakdowns</a>']
    if compared:
        nav.append('<a href="#comparisons">Comparisons</a>')
    drift = render_drift(score)
    nav += ['<a href="#drift">Drift</a>'] if drift else []
    nav += ['<a href="#queries">Queries</a>', '<a href="#methodology">Methodology</a>', '<a href="report.json">report.json</a>']
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(('[' + banner + '] ') if banner else '')}{e(title)}</title><style>{asset('report.css')}</style></head><body><main>"
        f"<h1>{e(title)}</h1><p class=\"subtitle\">{e(subtitle)}</p>{banner_html}"
        f"<nav>{''.join(nav)}</nav>"
        f'<section id="leaderboard"><h2>Leaderboard</h2>'
        f'<p class="note">Sorted by {e(order_by)} (click a column header to sort by it). Every value is a macro '
        f"average in [0, 1] with its {e(ci_label)} bootstrap interval below; — means undefined (beyond a result "
        "cap). Bold: best in column.</p>"
        f"{leaderboard(systems, colours, bench.get('n_queries'), score.get('table_metrics') or TABLE_METRICS)}"
        f"{_overlap_note(score)}{_order_notes(systems, score.get('scope') or {})}</section>"
        f"{published(score.get('published') or [], score.get('table_metrics') or TABLE_METRICS)}"
        f"{slices(score.get('slices') or [], score.get('table_metrics') or TABLE_METRICS, order_by)}"
        f'<section id="curves"><h2>Curves over k</h2><p class="note">Shaded: {e(ci_label)} bootstrap band. '
        "A line that stops early belongs to a service that returns fewer than k_max results.</p>"
        f"{curves(systems, colours, kmax, score.get('published'))}</section>"
        f'<section id="breakdowns"><h2>Breakdowns</h2>{breakdowns(systems, queries)}</section>'
        f"{compared}{drift}"
        f'<section id="queries"><h2>Per-query explorer</h2>{explorer(systems, with_dropped(score, queries))}</section>'
        f'<section id="methodology"><h2>Methodology</h2>{methodology(score, systems, json_sha256)}</section>'
        f"<footer>{banner_html and e(banner) + ' · '}Rendered by engines from report.json beside this page; "
        "no network resources are loaded.</footer>"
        f"</main><script>{asset('report.js')}</script></body></html>"
    )


def render_report(score: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``report.json`` and ``index.html`` into ``out_dir``; return the HTML path.

    Both files are written to temporary names first and renamed, so a failed render
    never leaves a half-written page beside an old JSON.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    blob = json.dumps(score, ensure_ascii=False, indent=1, sort_keys=False, allow_nan=False).encode("utf-8")
    sha = hashlib.sha256(blob).hexdigest()
    page = render_html(score, json_sha256=sha).encode("utf-8")
    tmp_json, tmp_html = out / ".report.json.tmp", out / ".index.html.tmp"
    tmp_json.write_bytes(blob)
    tmp_html.write_bytes(page)
    tmp_json.replace(out / "report.json")
    tmp_html.replace(out / "index.html")
    return out / "index.html"
