"""The static HTML report: one self-contained page rendered from the score JSON.

``render_report(score, out_dir)`` writes ``out_dir/report.json`` (the score JSON,
``engines.score/1``, exactly as given) and ``out_dir/index.html`` beside it. The page
needs no server and loads nothing from the network: styles, the curve plots (inline
SVG drawn here, so no plotting extra is needed) and the small query-filter script are
all inline. Every string that comes from data is escaped with :func:`html.escape`.

Sections: banner (development slices), leaderboard (n, dropped, badges, CIs), R@k and
nDCG@k curves with CI bands (plus P@k / Covered@k when the task has them), breakdowns
by style / kind / difficulty, paired comparisons, a per-query explorer, and a
methodology section built from the constants the scorer recorded in the JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from html import escape
from pathlib import Path
from typing import Any, Iterable, Sequence

SCHEMA = "engines.score/1"
HEADLINE = "nDCG@10"
TABLE_METRICS = ("nDCG@10", "R@1", "R@5", "R@10", "R@50", "R@100", "MRR", "MAP")
BREAKDOWN_DIMS = ("style", "kind", "difficulty")
# Okabe-Ito, then Tableau: distinguishable for colour-blind readers first.
PALETTE = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
    "#8c564b", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd",
)
X_TICKS = (1, 2, 5, 10, 20, 50, 100, 200)


def e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isnan(value):
        return "—"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}"
    return str(value)


def _metric(system: dict[str, Any], name: str) -> tuple[float | None, list[float | None] | None]:
    m = (system.get("metrics") or {}).get(name)
    if m is None:
        return None, None
    if isinstance(m, dict):
        return m.get("value"), m.get("ci")
    return m, None


def _sort_key(system: dict[str, Any]) -> tuple[int, float]:
    v, _ = _metric(system, HEADLINE)
    return (0, -v) if v is not None else (1, 0.0)


def system_label(system: dict[str, Any]) -> str:
    return str(system.get("id") or system.get("engine") or "?")


def short_labels(systems: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Column-header names: the id without a trailing ``(…)`` (e.g. a stand-in's URL) when
    that stays unique, else the full id."""
    full = [system_label(s) for s in systems]
    short = [f.split(" (", 1)[0] if f.endswith(")") and " (" in f else f for f in full]
    return {f: (sh if short.count(sh) == 1 else f) for f, sh in zip(full, short)}


def _header(label: str, shorts: dict[str, str], sort: str = "") -> str:
    attr = f' data-sort="{sort}"' if sort else ""
    return f'<th class="num"{attr} title="{e(label)}">{e(shorts.get(label, label))}</th>'


def _colours(systems: Sequence[dict[str, Any]]) -> dict[str, str]:
    return {system_label(s): PALETTE[i % len(PALETTE)] for i, s in enumerate(systems)}


# ----------------------------------------------------------------------------- parts


def _badges(system: dict[str, Any]) -> str:
    badges = [str(b) for b in system.get("badges") or []]
    licence = system.get("licence")
    if licence and not any("licen" in b.lower() or licence in b for b in badges):
        badges.append(f"licence: {licence}")
    out = []
    for b in badges:
        low = b.lower()
        cls = (
            "cap" if low.startswith("k≤") or low.startswith("k<=")
            else "warn" if "incomplete" in low or "different corpus" in low
            else "sample" if low.endswith("sampled")
            else "lic" if "licen" in low
            else ""
        )
        out.append(f'<span class="badge {cls}">{e(b)}</span>')
    return " ".join(out)


def _value_cell(system: dict[str, Any], name: str, best: float | None) -> str:
    v, ci = _metric(system, name)
    if v is None:
        cap = system.get("result_cap")
        why = f"undefined above k={cap} (the service returns at most {cap} results)" if cap else "undefined"
        return f'<td class="num undef" data-v="" title="{e(why)}">—</td>'
    strong = best is not None and abs(v - best) < 1e-12
    ci_html = ""
    if ci and len(ci) == 2 and ci[0] is not None and ci[1] is not None:
        ci_html = f'<div class="ci">[{fmt(ci[0])}, {fmt(ci[1])}]</div>'
    cls = "num best" if strong else "num"
    return f'<td class="{cls}" data-v="{v!r}">{fmt(v)}{ci_html}</td>'


def _leaderboard(
    systems: list[dict[str, Any]], colours: dict[str, str], n_queries: int | None,
    metrics: Sequence[str] = TABLE_METRICS,
) -> str:
    shorts = short_labels(systems)
    best = {}
    for name in metrics:
        vals = [v for v, _ in (_metric(s, name) for s in systems) if v is not None]
        best[name] = max(vals) if vals else None
    # <wbr>: long metric names (covered_paper@10) may wrap in a wide table, at a joint only.
    head = "".join(
        f'<th class="num" data-sort="desc" title="bootstrap interval below each value">'
        f'{e(m).replace("_", "_<wbr>").replace("@", "<wbr>@")}</th>'
        for m in metrics
    )
    rows = []
    for i, s in enumerate(systems, 1):
        label = system_label(s)
        sub = " · ".join(
            x for x in (
                str(s.get("engine") or ""),
                f"epoch {s['epoch']}" if s.get("epoch") is not None else "",
                "imported" if s.get("engine") == "run" else "local" if s.get("local") else "remote",
            ) if x
        )
        cells = "".join(_value_cell(s, m, best[m]) for m in metrics)
        dropped = s.get("dropped")
        unanswered = s.get("unanswered") or 0
        cov = s.get("coverage")
        lat = s.get("latency_p95_ms")
        rows.append(
            f'<tr class="system-row" data-system="{e(label)}">'
            f'<td class="num" data-v="{i}">{i}</td>'
            f'<td class="sys"><span class="swatch" style="background:{colours[label]}"></span>'
            f'<b>{e(shorts[label])}</b>'
            + (f'<div class="sub">{e(label[len(shorts[label]):].strip())}</div>' if shorts[label] != label else "")
            + f'<div class="sub" title="config {e(s.get("config_hash"))}">{e(sub)}</div>'
            + (f'<div class="sub source">source: {e(s["source"])}</div>' if s.get("source") else "")
            + f'<div class="badges">{_badges(s)}</div></td>'
            f'<td class="num">{e(s.get("n"))}</td>'
            f'<td class="num">{e(dropped)}</td>'
            f'<td class="num{" alert" if unanswered else ""}">{e(unanswered)}</td>'
            f"{cells}"
            f'<td class="num" data-v="{cov if isinstance(cov, (int, float)) else ""}">'
            f'{fmt(cov) if isinstance(cov, (int, float)) else e(cov) if cov is not None else "—"}</td>'
            f'<td class="num" data-v="{lat if isinstance(lat, (int, float)) else ""}">'
            f'{fmt(lat, 0 if lat >= 10 else 1) if isinstance(lat, (int, float)) else "—"}</td></tr>'
        )
    total = f" of {n_queries}" if n_queries else ""
    return (
        f'<div class="boardwrap"><table class="board sortable{" wide" if len(metrics) > 8 else ""}"><thead><tr>'
        '<th class="num" data-sort="asc">#</th><th data-sort="asc">system</th>'
        f'<th class="num" data-sort="desc" title="queries scored{e(total)}">n</th>'
        '<th class="num" data-sort="asc" title="gold not in the corpus: a coverage gap, not a zero">dropped</th>'
        '<th class="num" data-sort="asc" title="never answered (errors, parse failures): scored 0">unanswered</th>'
        f"{head}"
        '<th class="num" data-sort="desc" title="share of the benchmark\'s gold present in this system\'s corpus">coverage</th>'
        '<th class="num" data-sort="asc" title="95th percentile of the answer latency">p95 ms</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _x(k: float, left: float, width: float, kmax: float) -> float:
    return left + width * math.log(k) / math.log(kmax)


def _segments(ks: Sequence[int], ys: Sequence[Any]) -> list[list[int]]:
    """Index runs where the curve is defined (null above a result cap breaks the line)."""
    runs: list[list[int]] = []
    cur: list[int] = []
    for i, y in enumerate(ys):
        if y is None or i >= len(ks):
            if cur:
                runs.append(cur)
                cur = []
        else:
            cur.append(i)
    if cur:
        runs.append(cur)
    return runs


def curve_svg(
    systems: Sequence[dict[str, Any]], colours: dict[str, str], key: str, title: str, kmax: int,
    published: Sequence[dict[str, Any]] | None = None,
) -> str:
    """One inline-SVG chart: a line per system over k (log axis), its CI band shaded."""
    W, H = 560, 340
    left, right, top, bottom = 48, 12, 26, 40
    pw, ph = W - left - right, H - top - bottom
    kmax = max(int(kmax or 200), 2)

    def X(k: float) -> float:
        return _x(k, left, pw, kmax)

    def Y(v: float) -> float:
        return top + ph * (1 - max(0.0, min(1.0, float(v))))

    parts = [
        f'<svg class="curve" data-metric="{e(key)}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'role="img" aria-label="{e(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="16" class="ttl">{e(title)}</text>',
    ]
    for t in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        y = Y(t)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{t:.1f}</text>')
    for k in X_TICKS:
        if k > kmax:
            continue
        x = X(k)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{top + ph + 16}" class="tick" text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{H - 6}" class="tick" text-anchor="middle">k (log scale)</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>')
    drawn = 0
    for s in systems:
        curves = s.get("curves") or {}
        ks = curves.get("k") or []
        ys = curves.get(key)
        if not ks or not ys:
            continue
        label = system_label(s)
        colour = colours[label]
        lo, hi = curves.get(f"{key}_lo"), curves.get(f"{key}_hi")
        for run in _segments(ks, ys):
            if lo and hi and all(lo[i] is not None and hi[i] is not None for i in run):
                pts = [f"{X(ks[i]):.1f},{Y(hi[i]):.1f}" for i in run]
                pts += [f"{X(ks[i]):.1f},{Y(lo[i]):.1f}" for i in reversed(run)]
                parts.append(
                    f'<polygon class="band" data-system="{e(label)}" points="{" ".join(pts)}" '
                    f'fill="{colour}" fill-opacity="0.14" stroke="none"/>'
                )
        for run in _segments(ks, ys):
            d = " ".join(f"{'M' if j == 0 else 'L'}{X(ks[i]):.1f},{Y(ys[i]):.1f}" for j, i in enumerate(run))
            last = run[-1]
            parts.append(
                f'<path class="line" data-system="{e(label)}" d="{d}" fill="none" stroke="{colour}" '
                f'stroke-width="2"><title>{e(label)}: {e(key)}@{ks[last]} = {fmt(ys[last])}</title></path>'
            )
            if ks[last] < kmax:  # a capped system: mark where its curve stops
                parts.append(
                    f'<circle cx="{X(ks[last]):.1f}" cy="{Y(ys[last]):.1f}" r="3" fill="{colour}">'
                    f"<title>{e(label)} returns at most {ks[last]} results</title></circle>"
                )
        drawn += 1
    if drawn:  # reference marks go with measured curves, never through the "no data" label
        parts.extend(_published_marks(published or (), key, X, Y))
    if not drawn:
        parts.append(f'<text x="{left + pw / 2:.0f}" y="{top + ph / 2:.0f}" text-anchor="middle" class="tick">no data</text>')
    parts.append("</svg>")
    return "".join(parts)


def _published_marks(sources: Sequence[dict[str, Any]], key: str, X: Any, Y: Any) -> list[str]:
    """Dashed hollow markers at the k values a published source reports (reference only)."""
    from scoring.published import curve_points

    out = []
    for src in sources:
        for row in src.get("rows") or []:
            pts = curve_points(row, key)
            if not pts:
                continue
            label = f"{row.get('system')} — published, {src.get('source')} {src.get('table')}"
            d = " ".join(f"{'M' if j == 0 else 'L'}{X(k):.1f},{Y(v):.1f}" for j, (k, v) in enumerate(pts))
            out.append(f'<path class="published" data-published="{e(row.get("system"))}" d="{d}" fill="none" '
                       f'stroke="#777" stroke-width="1" stroke-dasharray="4 3"><title>{e(label)}</title></path>')
            for k, v in pts:
                out.append(f'<circle class="published" cx="{X(k):.1f}" cy="{Y(v):.1f}" r="3" fill="none" stroke="#555" '
                           f'stroke-dasharray="2 1.5"><title>{e(label)}: {e(key)}@{k} = {fmt(v)}</title></circle>')
    return out


def _published(sources: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    """Reference rows from the literature: their own table, never ranked with measured rows."""
    if not sources:
        return ""
    blocks = []
    for src in sources:
        names = [m for m in metrics if any(m in (r.get("metrics") or {}) for r in src.get("rows") or [])]
        names += sorted({m for r in src.get("rows") or [] for m in (r.get("metrics") or {})} - set(names))
        head = "".join(f'<th class="num">{e(m)}</th>' for m in names)
        rows = "".join(
            f'<tr class="published-row"><td class="sys">{e(r.get("system"))} <span class="badge pub">published</span></td>'
            + "".join(
                f'<td class="num">{fmt((r.get("metrics") or {}).get(m)) if (r.get("metrics") or {}).get(m) is not None else ""}</td>'
                for m in names
            )
            + "</tr>"
            for r in src.get("rows") or []
        )
        ref = str(src.get("ref") or "")
        link = f'<a href="{e(ref)}">{e(ref)}</a>' if ref.startswith("http") else e(ref)
        blocks.append(
            f'<h3>{e(src.get("source"))}, {e(src.get("table"))} ({link})</h3>'
            f'<p class="note">Computed on: {e(src.get("slice"))}; corpus: {e(src.get("corpus"))}. '
            f'Transcribed {e(src.get("transcribed"))}. {e(src.get("notes") or "")} Blank: not reported (not zero).</p>'
            f'<div class="boardwrap"><table class="board published"><thead><tr><th>system</th>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>"
        )
    return (
        '<section id="published"><h2>Published reference rows</h2>'
        '<p class="note">Numbers published by others on this query set, shown for reference: not ranked with the '
        "measured rows above, and not a hosted API's current result. Drawn as dashed hollow markers on the curves at "
        "the k values they report.</p>" + "".join(blocks) + "</section>"
    )


def _slices(slices: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    """The engine-subset views: every row re-scored on one engine's sampled queries."""
    if not slices:
        return ""
    parts = []
    for sl in slices:
        systems = sorted(sl.get("systems") or [], key=_sort_key)
        colours = _colours(systems)
        parts.append(
            f'<details class="slice" data-slice="{e(sl.get("name"))}"><summary>{e(sl.get("name"))}: every row on '
            f'{e(sl.get("subset"))} ({e(sl.get("n_queries"))} queries)</summary>'
            f"{_leaderboard(systems, colours, sl.get('n_queries'), metrics)}</details>"
        )
    return (
        '<section id="slices"><h2>Views</h2><p class="note">The leaderboard above is the full view. Each '
        "engine-subset view re-scores every row on the queries one engine was sampled on (engines crawl --sample), "
        "so rows compare like with like.</p>" + "".join(parts) + "</section>"
    )


def _legend(systems: Sequence[dict[str, Any]], colours: dict[str, str]) -> str:
    shorts = short_labels(systems)
    items = "".join(
        f'<span class="key" title="{e(system_label(s))}"><span class="swatch" '
        f'style="background:{colours[system_label(s)]}"></span>{e(shorts[system_label(s)])}</span>'
        for s in systems
    )
    return f'<div class="legend">{items}</div>'


def _curves(
    systems: list[dict[str, Any]], colours: dict[str, str], kmax: int, published: Sequence[dict[str, Any]] | None = None
) -> str:
    charts = [curve_svg(systems, colours, "R", "R@k (recall at k)", kmax, published),
              curve_svg(systems, colours, "nDCG", "nDCG@k", kmax, published)]
    controls = ""
    for key, title in (("P", "P@k (precision at k)"), ("Covered", "Covered@k (every gold unit found)")):
        if any((s.get("curves") or {}).get(key) for s in systems):
            charts.append(curve_svg(systems, colours, key, title, kmax, published))
        elif key == "P" and systems:
            # Shown disabled with its reason rather than hidden (METHODOLOGY.md).
            controls = (
                '<div class="controls"><label class="disabled"><input type="checkbox" data-metric="P" disabled> P@k</label> '
                '<span class="why">disabled: with one gold per query P@k is R@k / k</span></div>'
            )
    # Interpolated PR is flat and uninformative with one gold per query: drawn only with P@k.
    pr = [s for s in systems if (s.get("pr") or {}).get("recall") and (s.get("curves") or {}).get("P")]
    if pr:
        charts.append(_pr_svg(pr, colours))
    return _legend(systems, colours) + controls + '<div class="charts">' + "".join(charts) + "</div>"


def _pr_svg(systems: Sequence[dict[str, Any]], colours: dict[str, str]) -> str:
    W, H = 560, 340
    left, right, top, bottom = 48, 12, 26, 40
    pw, ph = W - left - right, H - top - bottom
    parts = [
        f'<svg class="curve" data-metric="PR" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        'role="img" aria-label="interpolated precision-recall" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="16" class="ttl">Interpolated precision–recall</text>',
    ]
    for t in (0, 0.2, 0.4, 0.6, 0.8, 1.0):
        y = top + ph * (1 - t)
        x = left + pw * t
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{t:.1f}</text>')
        parts.append(f'<text x="{x:.1f}" y="{top + ph + 16}" class="tick" text-anchor="middle">{t:.1f}</text>')
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{H - 6}" class="tick" text-anchor="middle">recall</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>')
    for s in systems:
        label = system_label(s)
        rec, prec = s["pr"].get("recall") or [], s["pr"].get("precision") or []
        pts = [(r, p) for r, p in zip(rec, prec) if r is not None and p is not None]
        if not pts:
            continue
        d = " ".join(
            f"{'M' if j == 0 else 'L'}{left + pw * r:.1f},{top + ph * (1 - p):.1f}" for j, (r, p) in enumerate(pts)
        )
        parts.append(f'<path class="line" data-system="{e(label)}" d="{d}" fill="none" stroke="{colours[label]}" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _breakdowns(systems: list[dict[str, Any]], queries: list[dict[str, Any]]) -> str:
    out = []
    for dim in BREAKDOWN_DIMS:
        values: list[str] = []
        for s in systems:
            for v in ((s.get("breakdowns") or {}).get(dim) or {}):
                if v not in values:
                    values.append(v)
        if not values:
            continue
        totals = {}
        for q in queries:
            totals[str(q.get(dim))] = totals.get(str(q.get(dim)), 0) + 1
        values.sort(key=lambda v: (-totals.get(v, 0), v))
        shorts = short_labels(systems)
        head = "".join(_header(system_label(s), shorts) for s in systems)
        rows = []
        for v in values:
            cells = []
            ns = []
            for s in systems:
                cell = ((s.get("breakdowns") or {}).get(dim) or {}).get(v)
                if not cell:
                    cells.append('<td class="num undef">—</td>')
                    continue
                nd, r10 = cell.get("nDCG@10"), cell.get("R@10")
                ns.append(cell.get("n"))
                pct = 0 if nd is None else max(0.0, min(1.0, nd)) * 100
                cells.append(
                    f'<td class="num bar" title="nDCG@10 {fmt(nd)}, R@10 {fmt(r10)}, n {e(cell.get("n"))}">'
                    f'{fmt(nd)}<div class="minibar"><span style="width:{pct:.1f}%"></span></div>'
                    f'<div class="ci">R@10 {fmt(r10)}</div></td>'
                )
            n_shown = max((n for n in ns if isinstance(n, int)), default=totals.get(v, ""))
            rows.append(f'<tr><th class="rowh">{e(v)}</th><td class="num">{e(n_shown)}</td>{"".join(cells)}</tr>')
        out.append(
            f'<h3>By {e(dim)}</h3><table class="breakdown" data-dim="{e(dim)}"><thead><tr><th>{e(dim)}</th>'
            f'<th class="num">n</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        )
    if not out:
        return "<p>No breakdowns in this score file.</p>"
    return '<p class="note">Each cell: nDCG@10 (and as a bar), R@10 below. n is the number of scored queries in the group.</p>' + "".join(out)


def _comparisons(comparisons: list[dict[str, Any]], shorts: dict[str, str], resamples: Any) -> str:
    if not comparisons:
        return ""
    # A bootstrap p-value cannot go below 1 / (resamples + 1): say so instead of printing it.
    floor = 1.0 / (int(resamples) + 1) if isinstance(resamples, int) and resamples > 0 else None
    rows = []
    for c in comparisons:
        ci = c.get("ci") or [None, None]
        p = c.get("p")
        sig = p is not None and p < 0.05
        p_txt = f"≤ {floor:.4f}" if p is not None and floor is not None and p <= floor * (1 + 1e-9) else fmt(p, 4)
        a, b = str(c.get("a")), str(c.get("b"))
        rows.append(
            f'<tr><td title="{e(a)}">{e(shorts.get(a, a))}</td><td title="{e(b)}">{e(shorts.get(b, b))}</td>'
            f'<td>{e(c.get("metric"))}</td>'
            f'<td class="num">{fmt(c.get("diff"))}</td><td class="num">[{fmt(ci[0])}, {fmt(ci[1])}]</td>'
            f'<td class="num{" best" if sig else ""}">{e(p_txt)}</td></tr>'
        )
    return (
        '<section id="comparisons"><h2>Paired comparisons</h2>'
        '<p class="note">Difference a − b over the same bootstrap resamples of the query set; '
        'two-sided p-value.</p><table class="cmp"><thead><tr><th>a</th><th>b</th><th>metric</th>'
        '<th class="num">diff</th><th class="num">CI</th><th class="num">p</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table></section>"
    )


def _rank_cell(positions: list[Any] | None, present: bool, answered: bool = True) -> tuple[str, str, str]:
    """(css class, text, sort key) for one system's ranks of a query's gold units."""
    if not present:
        return "na", "n/a", ""
    if not answered:
        return "unans", "✗", ""
    found = [p for p in positions or [] if p is not None]
    if not found:
        return "miss", "—", ""
    best = min(found)
    cls = "r1" if best == 1 else "r10" if best <= 10 else "rk"
    text = ", ".join("—" if p is None else str(p) for p in positions) if len(positions) > 1 else str(best)
    return cls, text, str(best)


def _with_dropped(score: dict[str, Any], queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scored queries plus the dropped ones (gold not in the corpus), each marked
    ``dropped``: from ``dropped_queries`` (text and gold) or, in a score file without them,
    from the scope's ``dropped_qids`` (id only)."""
    have = {str(q.get("qid")) for q in queries}
    records = {str(q.get("qid")): q for q in score.get("dropped_queries") or []}
    extra = []
    for qid in (score.get("scope") or {}).get("dropped_qids") or list(records):
        if str(qid) not in have:
            extra.append({**records.get(str(qid), {"qid": qid}), "dropped": True})
            have.add(str(qid))
    return list(queries) + extra


def _breakable(name: Any) -> str:
    """A declaration name, escaped, that may wrap after its dots and underscores only (so
    ``GaloisConnection`` stays whole and a long dotted name wraps at a component)."""
    return e(name).replace(".", ".<wbr>").replace("_", "_<wbr>")


def _explorer(systems: list[dict[str, Any]], queries: list[dict[str, Any]]) -> str:
    labels = [system_label(s) for s in systems]
    per_query = [s.get("per_query") or {} for s in systems]
    shorts = short_labels(systems)
    head = "".join(_header(lab, shorts, "asc") for lab in labels)
    rows = []
    styles: list[str] = []
    for q in queries:
        qid = str(q.get("qid"))
        style = str(q.get("style") or "")
        if style and style not in styles:
            styles.append(style)
        gold = q.get("gold") or []
        gold_html = "<br>".join(" | ".join(_breakable(n) for n in unit) for unit in gold)
        cells = []
        found = 0
        scored = 0
        for pq in per_query:
            entry = pq.get(qid)
            cls, text, key = _rank_cell(
                entry.get("positions") if entry else None, entry is not None,
                bool(entry.get("answered", True)) if entry else True,
            )
            if entry is not None:
                scored += 1
                found += cls in ("r1", "r10", "rk")
            cells.append(f'<td class="num rank {cls}" data-v="{key}">{e(text)}</td>')
        state = "dropped" if scored == 0 or q.get("dropped") else "none" if found == 0 else "all" if found == scored else "some"
        rows.append(
            f'<tr class="q" id="q-{e(qid)}" data-style="{e(style)}" data-state="{state}">'
            f'<td class="qid">{e(qid)}</td><td>{e(style)}</td><td>{e(q.get("kind") or "")}</td>'
            f'<td>{e(q.get("difficulty") or "")}</td><td class="qtext">{e(q.get("text") or "")}'
            + (' <span class="badge drop" title="no gold name of this query is in the corpus: not scored">dropped</span>'
               if q.get("dropped") else "") + '</td>'
            f'<td class="gold">{gold_html}</td>{"".join(cells)}</tr>'
        )
    style_opts = "".join(f'<option value="{e(s)}">{e(s)}</option>' for s in styles)
    return (
        '<div class="filters"><input id="qfilter" type="search" placeholder="filter: query text, id or gold name" size="40">'
        f'<select id="qstyle"><option value="">every style</option>{style_opts}</select>'
        '<select id="qstate"><option value="">every query</option>'
        '<option value="none">missed by every system</option><option value="some">found by some, missed by others</option>'
        '<option value="all">found by every system</option><option value="dropped">dropped (gold not in corpus)</option></select>'
        f' <span id="qcount">{len(rows)} queries</span></div>'
        '<p class="note">Cells: the rank at which the system returned the gold (several gold units: one rank each); '
        '— not found within k_max; ✗ never answered (scored 0); n/a not scored for this system.</p>'
        '<div class="qwrap"><table id="queries-table" class="queries sortable"><thead><tr><th data-sort="asc">id</th>'
        '<th data-sort="asc">style</th><th data-sort="asc">kind</th><th data-sort="asc">difficulty</th>'
        f'<th data-sort="asc">query</th><th data-sort="asc">gold</th>{head}</tr></thead><tbody>'
        + "".join(rows) + "</tbody></table></div>"
    )


_SCRIPT = """
(function(){
  var f=document.getElementById('qfilter'), st=document.getElementById('qstyle'),
      ss=document.getElementById('qstate'), c=document.getElementById('qcount');
  if(!f) return;
  var rows=Array.prototype.slice.call(document.querySelectorAll('#queries-table tbody tr'));
  function apply(){
    var t=f.value.toLowerCase(), s=st.value, x=ss.value, n=0;
    rows.forEach(function(r){
      var ok=(!s||r.dataset.style===s)&&(!x||r.dataset.state===x)&&(!t||r.textContent.toLowerCase().indexOf(t)>=0);
      r.style.display=ok?'':'none'; if(ok) n++;
    });
    c.textContent=n+' of '+rows.length+' queries';
  }
  f.addEventListener('input',apply); st.addEventListener('change',apply); ss.addEventListener('change',apply);
})();
(function(){
  /* Click a column header to sort; again to reverse. Cells sort by data-v (numbers; empty = last) or text. */
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function(t){
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function(th, i){
      th.classList.add('sorter');
      th.addEventListener('click', function(){
        var dir = (t.dataset.sortcol === String(i)) ? (t.dataset.sortdir === 'asc' ? 'desc' : 'asc') : (th.dataset.sort || 'asc');
        t.dataset.sortcol = i; t.dataset.sortdir = dir;
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        function key(r){ var c = r.cells[i]; if(!c) return null;
          if(c.dataset.v !== undefined) return c.dataset.v === '' ? null : parseFloat(c.dataset.v);
          return c.textContent.toLowerCase(); }
        rows.sort(function(a, b){ var x = key(a), y = key(b);
          if(x === null || y === null) return (x === null) - (y === null);
          var r = x < y ? -1 : x > y ? 1 : 0; return dir === 'asc' ? r : -r; });
        rows.forEach(function(r){ body.appendChild(r); });
      });
    });
  });
})();
"""


def _renderer_hashes(systems: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for s in systems:
        for k, v in sorted((s.get("params") or {}).items()):
            if "renderer" in k.lower() and v:
                out.append((system_label(s), k, str(v)))
    return out


def _constants_drift(score: dict[str, Any]) -> list[str]:
    """Where the JSON's k_max / bootstrap differ from the pinned constants of this code."""
    try:
        from scoring.bootstrap import CI, RESAMPLES, SEED
        from scoring.metrics import K_MAX
    except ImportError:  # rendering a score file needs no scorer
        return []
    boot = score.get("bootstrap") or {}
    pairs = (("k_max", score.get("k_max"), K_MAX), ("resamples", boot.get("resamples"), RESAMPLES),
             ("seed", boot.get("seed"), SEED), ("interval", boot.get("ci"), CI))
    return [f"{name} {got} (code: {want})" for name, got, want in pairs if got is not None and got != want]


# Where the definitions behind every figure are written down (in the engines repository).
METHODOLOGY_DOC = "docs/METHODOLOGY.md"


def _methodology(score: dict[str, Any], systems: list[dict[str, Any]], json_sha: str) -> str:
    bench = score.get("benchmark") or {}
    corpus = score.get("corpus") or {}
    boot = score.get("bootstrap") or {}
    ci = boot.get("ci")
    ci_txt = f"{ci * 100:g}% " if isinstance(ci, (int, float)) and ci <= 1 else f"{ci}% " if ci else ""
    rows = [
        ("definitions", f"{METHODOLOGY_DOC} in the engines source at the code version below (metrics, "
                        "first occurrence, dropped queries, bootstrap)"),
        ("scoring profile", score.get("profile")),
        ("k_max", f"{score.get('k_max')} (every ranked list is truncated here; curves run k = 1 … k_max)"),
        ("bootstrap", f"{ci_txt}percentile interval, {boot.get('resamples')} resamples of the query set, seed {boot.get('seed')}"),
        ("benchmark", f"{bench.get('name')} ({bench.get('task')}), {bench.get('n_queries')} queries, sha256 {bench.get('sha256')}"),
        ("corpus", f"{corpus.get('name')}@{corpus.get('revision')}, {corpus.get('row_count')} rows, sha256 {corpus.get('sha256')}"
                   + (" — a development slice" if corpus.get("slice") else "")),
        ("subset", score.get("subset") or "none (every query)"),
        ("code version", score.get("code_version")),
        ("generated at", score.get("generated_at")),
        ("score file", f"report.json (schema {score.get('schema')}), sha256 {json_sha}"),
    ]
    bundle = score.get("bundle") or {}
    if bundle.get("sha256"):
        rows.append(("leaderboard bundle", f"{bundle.get('file')}, sha256 {bundle['sha256']}; re-derive every "
                     f"figure offline: {bundle.get('verify')}"))
    for label, key, value in _renderer_hashes(systems):
        rows.append((f"renderer ({label})", f"{key} = {value}"))
    drift = _constants_drift(score)
    if drift:
        rows.append(("note", "this score file was made with other constants than this code's: " + "; ".join(drift)
                     + " — its numbers are not comparable to a fresh run"))
    scope = score.get("scope") or {}
    if scope.get("styles"):
        rows.append(("styles scored", ", ".join(map(str, scope["styles"]))))
    dl = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in rows)
    dropped = scope.get("dropped_qids") or []
    if dropped:
        dl += (
            f"<dt>dropped queries</dt><dd><details><summary>{len(dropped)} queries whose gold is not in this corpus "
            "(a coverage gap: not scored, not zero)</summary>"
            f'<p class="mono">{e(", ".join(map(str, dropped)))}</p></details></dd>'
        )
    sys_rows = "".join(
        f'<tr><td>{e(system_label(s))}</td><td>{e(s.get("engine"))}</td><td class="mono">{e(s.get("config_hash"))}</td>'
        f'<td class="num">{e(s.get("epoch"))}</td><td>{"imported" if s.get("engine") == "run" else "local" if s.get("local") else "remote"}</td>'
        f'<td class="num">{e(s.get("result_cap") or "")}</td><td>{e(s.get("licence") or "")}</td>'
        f'<td class="mono small">{e(json.dumps(s.get("params") or {}, sort_keys=True, ensure_ascii=False))}</td></tr>'
        for s in systems
    )
    return (
        f'<dl class="meta">{dl}</dl>'
        "<h3>Definitions</h3><ul class=\"defs\">"
        "<li><b>Gold unit</b>: a set of interchangeable names; a unit is found at the rank of the earliest returned "
        "row belonging to it. Ranks are 1-based, as returned; a repeated row counts at its first occurrence only.</li>"
        "<li><b>R@k</b> = found units within k / units. <b>nDCG@k</b>: binary relevance, DCG = Σ 1/log₂(pos+1), "
        "IDCG over min(k, |G|) ideal positions. <b>MRR</b>: mean of 1/first found rank (0 if none). "
        "<b>MAP</b>: average precision divided by |G|, so unfound gold costs.</li>"
        "<li><b>Macro average</b> over scored queries. A query whose gold is absent from the corpus is "
        "<i>dropped</i> (coverage gap, not a zero); a query the system never answered scores 0 and the row is "
        "badged <i>incomplete</i>.</li>"
        "<li><b>k≤N</b>: the service returns at most N results, so every metric above N is undefined (shown —), "
        "not flat.</li>"
        "</ul>"
        '<h3>Systems</h3><table class="systems"><thead><tr><th>system</th><th>engine</th><th>config hash</th>'
        '<th class="num">epoch</th><th>where</th><th class="num">result cap</th><th>licence</th><th>parameters</th>'
        f"</tr></thead><tbody>{sys_rows}</tbody></table>"
    )


_CSS = """
:root{--fg:#1b1f24;--muted:#5b6470;--line:#d8dde3;--bg:#fff;--head:#f4f6f8;--accent:#0b5cad}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg);margin:0}
main{max-width:1240px;margin:0 auto;padding:18px 20px 60px}
h1{font-size:24px;margin:6px 0 2px} h2{font-size:19px;margin:32px 0 8px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
.subtitle{color:var(--muted);margin:0 0 10px}
.banner{background:#fff3cd;border:2px solid #e0a800;color:#6b4e00;font-weight:700;font-size:16px;padding:10px 14px;border-radius:6px;margin:10px 0}
nav a{color:var(--accent);text-decoration:none;margin-right:14px} nav{margin:8px 0 4px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{padding:5px 6px;border-bottom:1px solid var(--line);vertical-align:top;text-align:left}
thead th{background:var(--head);position:sticky;top:0;font-weight:600;white-space:nowrap}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.best{font-weight:700}
.ci{font-size:11px;color:var(--muted);font-weight:400}
.sub{font-size:11px;color:var(--muted)}
td.sys{min-width:170px;max-width:260px;overflow-wrap:anywhere}.badges{margin-top:2px}
.board td,.board th{font-size:13px;padding:5px 4px}.board .ci{font-size:10px}
.boardwrap{overflow-x:auto}
.board.wide td,.board.wide th{font-size:12px;padding:4px 3px}.board.wide td.num{white-space:normal}.board.wide th{white-space:normal}.board.wide .ci{font-size:9.5px}.board.wide td.sys{min-width:140px}
.undef{color:#9aa3ad}
.alert{color:#b3261e;font-weight:700}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.badge{display:inline-block;font-size:11px;padding:1px 6px;border-radius:9px;background:#e8ecf0;margin:1px 2px;white-space:nowrap}
.badge.cap{background:#dbe9f8;color:#0b4a8b}.badge.sample{background:#fff3cd;color:#6b4e00}.badge.pub{background:#eee;color:#444;border:1px dashed #888}
.controls{margin:4px 0;font-size:12.5px}.controls .disabled{color:var(--muted)}.controls .why{color:var(--muted);font-style:italic}.badge.warn{background:#fde2e1;color:#8a1c15}.badge.lic{background:#efe4f7;color:#5b2a80}
.legend{margin:4px 0 8px}.key{margin-right:16px;white-space:nowrap}
.charts{display:flex;flex-wrap:wrap;gap:14px}
svg.curve{background:#fff;border:1px solid var(--line);border-radius:4px;max-width:100%;height:auto}
svg .grid{stroke:#eceff2;stroke-width:1} svg .frame{fill:none;stroke:#b8c0c8}
svg .tick{font-size:11px;fill:var(--muted)} svg .ttl{font-size:13px;font-weight:600;fill:var(--fg)}
.breakdown{width:auto} .breakdown td.bar{min-width:120px} .rowh{font-weight:500}
.minibar{height:5px;background:#eceff2;border-radius:3px;margin:2px 0 1px}.minibar span{display:block;height:100%;background:#4a8fd4;border-radius:3px}
.note{color:var(--muted);font-size:12.5px;margin:4px 0}
.filters{margin:6px 0;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.filters input,.filters select{font:inherit;padding:3px 6px}
.qwrap{max-height:760px;overflow:auto;border:1px solid var(--line)}
.queries td{font-size:12.5px}.qtext{min-width:170px;max-width:340px}.gold{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11.5px;min-width:130px;max-width:260px;overflow-wrap:break-word}
.queries thead th.num{white-space:normal;overflow-wrap:break-word;min-width:52px;max-width:110px}
.qid{white-space:nowrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11.5px}
td.rank.r1{background:#b9e4c4;font-weight:700}td.rank.r10{background:#dcf1e1}td.rank.rk{background:#fdf0c6}
td.rank.miss{background:#f6dcdc;color:#8a1c15}td.rank.na{color:#9aa3ad}td.rank.unans{background:#e9d3f0;color:#5b2a80;font-weight:700}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px}dl.meta dt{font-weight:600}dl.meta dd{margin:0;word-break:break-all}
.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:11.5px;word-break:break-all}.small{font-size:11px}
th.sorter{cursor:pointer}th.sorter:hover{text-decoration:underline}
footer{margin-top:30px;color:var(--muted);font-size:12px}
"""


def _overlap_note(score: dict[str, Any]) -> str:
    n = score.get("overlapping_units") or 0
    if not n:
        return ""
    return (
        f'<p class="note overlap">{e(n)} scored queries have premise groups that share a name. There, P@k, nDCG and '
        "MAP credit each returned row to at most one group (maximum matching); R@k and Covered@k count every group "
        "a row belongs to (docs/METHODOLOGY.md, “Units that share a returned row”).</p>"
    )


def render_html(score: dict[str, Any], *, json_sha256: str = "") -> str:
    """The whole page as a string (no I/O)."""
    if score.get("schema") != SCHEMA:
        from store.errors import InputError

        raise InputError(f"score file has schema {score.get('schema')!r}, expected {SCHEMA!r}; re-run engines score")
    systems = sorted(score.get("systems") or [], key=_sort_key)
    colours = _colours(systems)
    queries = score.get("queries") or []
    bench = score.get("benchmark") or {}
    corpus = score.get("corpus") or {}
    banner = score.get("banner")
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
    comparisons = _comparisons(
        score.get("comparisons") or [], short_labels(systems), (score.get("bootstrap") or {}).get("resamples")
    )
    nav = ['<a href="#leaderboard">Leaderboard</a>', '<a href="#curves">Curves</a>', '<a href="#breakdowns">Breakdowns</a>']
    if comparisons:
        nav.append('<a href="#comparisons">Comparisons</a>')
    from scoring.report_drift import render_drift  # the Drift section (two epochs of a system)

    drift = render_drift(score)
    nav += ['<a href="#drift">Drift</a>'] if drift else []
    nav += ['<a href="#queries">Queries</a>', '<a href="#methodology">Methodology</a>', '<a href="report.json">report.json</a>']
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(('[' + banner + '] ') if banner else '')}{e(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{e(title)}</h1><p class=\"subtitle\">{e(subtitle)}</p>{banner_html}"
        f"<nav>{''.join(nav)}</nav>"
        f'<section id="leaderboard"><h2>Leaderboard</h2>'
        f'<p class="note">Sorted by {e(HEADLINE)} (click a column header to sort by it). Every value is a macro '
        f"average in [0, 1] with its {e(ci_label)} bootstrap interval below; — means undefined (beyond a result "
        "cap). Bold: best in column.</p>"
        f"{_leaderboard(systems, colours, bench.get('n_queries'), score.get('table_metrics') or TABLE_METRICS)}"
        f"{_overlap_note(score)}</section>"
        f"{_published(score.get('published') or [], score.get('table_metrics') or TABLE_METRICS)}"
        f"{_slices(score.get('slices') or [], score.get('table_metrics') or TABLE_METRICS)}"
        f'<section id="curves"><h2>Curves over k</h2><p class="note">Shaded: {e(ci_label)} bootstrap band. '
        "A line that stops early belongs to a service that returns fewer than k_max results.</p>"
        f"{_curves(systems, colours, kmax, score.get('published'))}</section>"
        f'<section id="breakdowns"><h2>Breakdowns</h2>{_breakdowns(systems, queries)}</section>'
        f"{comparisons}{drift}"
        f'<section id="queries"><h2>Per-query explorer</h2>{_explorer(systems, _with_dropped(score, queries))}</section>'
        f'<section id="methodology"><h2>Methodology</h2>{_methodology(score, systems, json_sha256)}</section>'
        f"<footer>{banner_html and e(banner) + ' · '}Rendered by engines from report.json beside this page; "
        "no network resources are loaded.</footer>"
        f"</main><script>{_SCRIPT}</script></body></html>"
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
