"""Figures for papers: metric curves over k = 1 … k_max from a score document (matplotlib).

``plot_curves(doc, metric, out)`` draws one metric's macro-averaged curve per row with its
bootstrap band (R@k and nDCG@k carry bands in the score JSON; P@k and Covered@k do not),
and writes PDF, PNG or SVG by the file's suffix. Choices for print:

- one column wide (3.4 in), 7–8 pt text, vector output for PDF/SVG (TrueType fonts
  embedded in PDFs, so journals' font checks pass), 300 dpi for PNG;
- the report's colours (Okabe–Ito first, colour-blind safe), each row in the colour of
  its place on the leaderboard, with line styles as a second cue;
- the legend in leaderboard order and under the score table's labels
  (:mod:`scoring.view`);
- a capped row's curve ends at its cap with a dot; a sampled row is dotted and its
  label says ``n=N sampled``; published reference rows (when the document carries them)
  are dashed hollow markers at the k values they report, labelled "published";
- a development slice's banner ends the title, as the score table prints it.

matplotlib is the ``plots`` extra and is imported here only, lazily.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from scoring import view
from store.errors import InputError
from store.text import escaped

METRICS = {"ndcg": ("nDCG", "nDCG@k"), "recall": ("R", "R@k"), "precision": ("P", "P@k"), "covered": ("Covered", "Covered@k")}
FORMATS = (".pdf", ".png", ".svg")
LINESTYLES = ("-", "--", "-.", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)))
PUBLISHED_GREYS = ("#555555", "#888888", "#333333", "#AAAAAA")
COLUMN_WIDTH_IN = 3.4
RC = {
    "font.size": 7, "axes.labelsize": 8, "axes.titlesize": 8, "legend.fontsize": 6,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "pdf.fonttype": 42, "ps.fonttype": 42,
    "svg.fonttype": "path", "axes.linewidth": 0.6, "lines.linewidth": 1.2,
    "svg.hashsalt": "engines", "path.simplify": False,
    # Names are text: a run named "$\\frac{$" is drawn as written, not parsed as mathtext.
    "text.parse_math": False,
}


def plot_curves(doc: dict[str, Any], metric: str, out: str | Path) -> Path:
    """Render ``metric`` (ndcg | recall | precision | covered) of every row; return the path."""
    if metric not in METRICS:
        raise InputError(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"--out {out}: the file name must end in {', '.join(FORMATS)}")
    if not out.parent.exists():
        raise InputError(f"--out {out}: directory {out.parent} does not exist; create it first")
    fig = figure(doc, metric)
    import matplotlib

    with matplotlib.rc_context(RC):
        tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
        try:
            fig.savefig(tmp, dpi=300, format=out.suffix.lower().lstrip("."), metadata=_metadata(out.suffix.lower()))
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()
    return out


def legend_label(s: dict[str, Any]) -> str:
    """A row's legend entry: its id exactly as the leaderboard table prints it (so
    "leanfinder (stand-in)" keeps its "(stand-in)"), plus the sample size of a sampled row
    and the source of an imported run."""
    label = view.label(s)
    sample = next((b for b in s.get("badges") or [] if b.endswith("sampled")), None)
    if sample:
        label += f" ({sample})"
    if s.get("source"):  # an imported run: where it came from
        src = str(s["source"])
        label += f" [imported: {src if len(src) <= 40 else src[:39] + '…'}]"
    return escaped(label)


def figure(doc: dict[str, Any], metric: str) -> Any:
    """The matplotlib Figure of ``metric`` (what :func:`plot_curves` saves)."""
    key, ylabel, ranked, systems = _rows(doc, metric)
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("engines plot needs matplotlib: pip install 'engines[plots]'") from None

    with matplotlib.rc_context(RC):
        n_entries = len(systems) + len(doc.get("published") or [])
        height = COLUMN_WIDTH_IN * 0.72 + 0.13 * n_entries
        fig = Figure(figsize=(COLUMN_WIDTH_IN, height), layout="constrained")
        ax = fig.add_subplot()
        kmax = int(doc.get("k_max") or 200)
        _draw_rows(ax, systems, view.colours(ranked), key, kmax)
        _draw_published(ax, doc.get("published") or [], key)
        _axes(ax, doc, ylabel, kmax)
        # Below the axes, so no curve is hidden behind it.
        labels = ax.get_legend_handles_labels()[1]
        ncols = 2 if all(len(lb) <= 30 for lb in labels) else 1
        fig.legend(loc="outside lower center", ncols=ncols, frameon=False, handlelength=2.2)
    return fig


def _rows(doc: dict[str, Any], metric: str) -> tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(curve key, axis label, every row in leaderboard order, the rows with curves to draw),
    or the InputError that says why nothing can be drawn."""
    if metric not in METRICS:
        raise InputError(f"--metric {metric!r}: choose one of {', '.join(METRICS)}")
    if doc.get("profile", "main") != "main":
        raise InputError("engines plot draws main-profile curves; MAMUT profiles have no curves over k")
    key, ylabel = METRICS[metric]
    ranked = view.ranked(list(doc.get("systems") or []), view.headline(doc))
    systems = [s for s in ranked if (s.get("curves") or {}).get("k")]
    if not systems:
        raise InputError("no scored rows with curves to plot (crawl or run an engine, then score)")
    if all((s.get("curves") or {}).get(key) is None for s in systems):
        if key in ("P", "Covered"):
            raise InputError(f"{ylabel} is not drawn on single-gold tasks: with one gold per query P@k is R@k / k "
                             "and Covered@k is R@k; plot --metric recall")
        raise InputError(f"the score document has no {ylabel} curves")
    return key, ylabel, ranked, systems


def _draw_rows(ax: Any, systems: list[dict[str, Any]], colours: dict[str, str], key: str, kmax: int) -> None:
    """One line per row in its leaderboard colour, its bootstrap band shaded, a dot where a
    capped row stops; a sampled row dotted."""
    for i, s in enumerate(systems):
        curves = s["curves"]
        ks, ys = curves["k"], curves.get(key)
        if ys is None:
            continue
        pts = [(k, y) for k, y in zip(ks, ys) if y is not None]
        if not pts:
            continue
        colour = colours[view.label(s)]
        sample = next((b for b in s.get("badges") or [] if b.endswith("sampled")), None)
        style = ":" if sample else LINESTYLES[i % len(LINESTYLES)]
        xs, vs = zip(*pts)
        lo, hi = curves.get(f"{key}_lo"), curves.get(f"{key}_hi")
        if lo and hi:
            band = [(k, a, b) for k, a, b in zip(ks, lo, hi) if a is not None and b is not None]
            if band:
                bk, ba, bb = zip(*band)
                ax.fill_between(bk, ba, bb, color=colour, alpha=0.15, linewidth=0)
        ax.plot(xs, vs, color=colour, linestyle=style, label=legend_label(s))
        if xs[-1] < kmax:  # a capped service: the curve stops at its cap
            ax.plot([xs[-1]], [vs[-1]], marker="o", markersize=3, color=colour)


def _draw_published(ax: Any, sources: list[dict[str, Any]], key: str) -> None:
    """Published reference rows: dashed grey hollow markers at the k values they report."""
    from scoring.reference_rows import DIFFERENT_CORPUS, curve_points

    g = 0
    for src in sources:
        first = True
        for row in src.get("rows") or []:
            pts = curve_points(row, key)
            if not pts:
                continue
            xs, vs = zip(*pts)
            grey = PUBLISHED_GREYS[g % len(PUBLISHED_GREYS)]
            # One legend entry per source; each row is named at its last point instead,
            # so a dozen reference rows do not swamp a one-column legend.
            ax.plot(xs, vs, linestyle=(0, (2, 2)), marker="o", markerfacecolor="none", markersize=2.5,
                    linewidth=0.6, color=grey,
                    label=escaped(f"published: {src.get('source', '')}"
                           + (f" ({DIFFERENT_CORPUS})" if src.get("different_corpus") else "")) if first else None)
            ax.annotate(escaped(str(row["system"]).split(" (", 1)[0]), (xs[-1], vs[-1]), xytext=(2, 0),
                        textcoords="offset points", fontsize=4, color=grey, va="center")
            first = False
            g += 1


def _axes(ax: Any, doc: dict[str, Any], ylabel: str, kmax: int) -> None:
    """Log k axis, [0, 1] value axis, and the title: benchmark, subset, slice, banner."""
    ax.set_xscale("log")
    ax.set_xlim(1, kmax)
    ticks = [k for k in (1, 2, 5, 10, 20, 50, 100, 200) if k <= kmax]
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_ylim(0, 1)
    ax.set_xlabel("k")
    ax.set_ylabel(ylabel)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    bench = (doc.get("benchmark") or {}).get("name", "")
    title = bench + (f" · {doc['subset']}" if doc.get("subset") else "")
    if (doc.get("scope") or {}).get("slice"):
        title += f" · {doc['scope']['slice']['name']}"
    if view.banner(doc):
        title += f" · {view.banner(doc)}"
    ax.set_title(escaped(title), loc="left")


def _metadata(suffix: str) -> dict[str, Any]:
    # No creation dates: the same score document renders to the same bytes.
    if suffix == ".pdf":
        return {"Creator": "engines", "CreationDate": None}
    if suffix == ".svg":
        return {"Creator": "engines", "Date": None}
    return {"Software": "engines"}
