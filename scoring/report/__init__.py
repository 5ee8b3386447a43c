"""The static HTML report: one self-contained page rendered from the score JSON.

``render_report(score, out_dir)`` writes ``out_dir/report.json`` (the score JSON,
``engines.score/1``, exactly as given) and ``out_dir/index.html`` beside it. The page
needs no server and loads nothing from the network: styles, the curve plots (inline
SVG drawn here, so no plotting extra is needed) and the small query-filter script are
all inline. Every string that comes from data is escaped with :func:`html.escape`.

Sections: banner (development slices), leaderboard (n, dropped, badges, CIs), R@k and
nDCG@k curves with CI bands (plus P@k / Covered@k when the task has them), breakdowns
by style / kind / difficulty, paired comparisons, drift, a per-query explorer, and a
methodology section built from the constants the scorer recorded in the JSON.

The modules, lowest first: ``common`` (escaping, formatting), ``charts`` (inline SVG),
``tables`` (leaderboard, published rows, views, breakdowns, comparisons), ``explorer``,
``methodology``, ``drift`` (the Drift section and the drift documents it shows), and
``page`` (the page itself, with ``assets/report.css`` and ``assets/report.js``).
Row order, labels, colours and the banner come from :mod:`scoring.view`.
"""

from scoring.report.charts import curve_svg
from scoring.report.drift import drift_docs, render_drift
from scoring.report.methodology import METHODOLOGY_DOC
from scoring.report.page import SCHEMA, render_html, render_report

__all__ = ["METHODOLOGY_DOC", "SCHEMA", "curve_svg", "drift_docs", "render_drift", "render_html", "render_report"]
