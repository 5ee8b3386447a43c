"""The report's charts, drawn here as inline SVG (no plotting extra needed): the curves
over k with their bootstrap bands and the published reference marks, the interpolated
precision-recall chart, and the legend above them."""

from __future__ import annotations

import math
from typing import Any, Sequence

from scoring.report.common import e, fmt
from scoring.view import label as system_label

X_TICKS = (1, 2, 5, 10, 20, 50, 100, 200)


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
    from scoring.reference_rows import curve_points, row_name

    out = []
    for src in sources:
        for row in src.get("rows") or []:
            pts = curve_points(row, key)
            if not pts:
                continue
            label = f"{row_name(row)} — published, {src.get('source')} {src.get('table')}"
            d = " ".join(f"{'M' if j == 0 else 'L'}{X(k):.1f},{Y(v):.1f}" for j, (k, v) in enumerate(pts))
            out.append(f'<path class="published" data-published="{e(row.get("system"))}" d="{d}" fill="none" '
                       f'stroke="#777" stroke-width="1" stroke-dasharray="4 3"><title>{e(label)}</title></path>')
            for k, v in pts:
                out.append(f'<circle class="published" cx="{X(k):.1f}" cy="{Y(v):.1f}" r="3" fill="none" stroke="#555" '
                           f'stroke-dasharray="2 1.5"><title>{e(label)}: {e(key)}@{k} = {fmt(v)}</title></circle>')
    return out



def _legend(systems: Sequence[dict[str, Any]], colours: dict[str, str]) -> str:
    items = "".join(
        f'<span class="key" title="{e(system_label(s))}"><span class="swatch" '
        f'style="background:{colours[system_label(s)]}"></span>{e(system_label(s))}</span>'
        for s in systems
    )
    return f'<div class="legend">{items}</div>'


def curves(
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

