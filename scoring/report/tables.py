"""The report's tables: the leaderboard (with its badges and interval cells), the
published reference rows, the engine-subset views, the breakdowns and the paired
comparisons. Rows arrive in leaderboard order (:func:`scoring.view.ranked`)."""

from __future__ import annotations

from typing import Any, Sequence

from scoring.report.common import TABLE_METRICS, e, fmt, header, metric
from scoring.view import colours as colours_of
from scoring.view import label as system_label
from scoring.view import ranked

BREAKDOWN_DIMS = ("style", "kind", "difficulty")


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
    v, ci = metric(system, name)
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


def leaderboard(
    systems: list[dict[str, Any]], colours: dict[str, str], n_queries: int | None,
    metrics: Sequence[str] = TABLE_METRICS,
) -> str:
    best = {}
    for name in metrics:
        vals = [v for v, _ in (metric(s, name) for s in systems) if v is not None]
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
            f'<b>{e(label)}</b>'
            f'<div class="sub" title="config {e(s.get("config_hash"))}">{e(sub)}</div>'
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



def published(sources: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    """Reference rows from the literature: their own table, never ranked with measured rows."""
    if not sources:
        return ""
    blocks = []
    for src in sources:
        names = [m for m in metrics if any(m in (r.get("metrics") or {}) for r in src.get("rows") or [])]
        names += sorted({m for r in src.get("rows") or [] for m in (r.get("metrics") or {})} - set(names))
        head = "".join(f'<th class="num">{e(m)}</th>' for m in names)
        rows = "".join(
            f'<tr class="published-row"><td class="sys">{e(r.get("system"))} <span class="badge pub">published</span>'
            + "".join(f' <span class="badge diffcorpus">{e(b)}</span>' for b in r.get("badges") or []) + "</td>"
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


def slices(slices: Sequence[dict[str, Any]], metrics: Sequence[str], order_by: str) -> str:
    """The engine-subset views: every row re-scored on one engine's sampled queries."""
    if not slices:
        return ""
    parts = []
    for sl in slices:
        systems = ranked(sl.get("systems") or [], order_by)
        colours = colours_of(systems)
        parts.append(
            f'<details class="slice" data-slice="{e(sl.get("name"))}"><summary>{e(sl.get("name"))}: every row on '
            f'{e(sl.get("subset"))} ({e(sl.get("n_queries"))} queries)</summary>'
            f"{leaderboard(systems, colours, sl.get('n_queries'), metrics)}</details>"
        )
    return (
        '<section id="slices"><h2>Views</h2><p class="note">The leaderboard above is the full view. Each '
        "engine-subset view re-scores every row on the queries one engine was sampled on (engines crawl --sample), "
        "so rows compare like with like.</p>" + "".join(parts) + "</section>"
    )



def breakdowns(systems: list[dict[str, Any]], queries: list[dict[str, Any]]) -> str:
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
        head = "".join(header(s) for s in systems)
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


def comparisons(comparisons: list[dict[str, Any]], resamples: Any) -> str:
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
            f'<tr><td title="{e(a)}">{e(a)}</td><td title="{e(b)}">{e(b)}</td>'
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

