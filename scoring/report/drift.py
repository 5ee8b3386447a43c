"""The report's "Drift" section: for each configuration with two epochs, the overall
figures of :func:`scoring.drift.drift` and a per-query table linked to the explorer.

Kept apart from :mod:`scoring.report.page` (which calls :func:`render_drift` once) so
the leaderboard page and the drift figures evolve independently. The drift documents
travel inside the report's JSON under ``"drift"``, so ``--from-json`` renders them too.
"""

from __future__ import annotations

from typing import Any

from scoring.report.common import e, fmt


def drift_docs(db, bench: str, score_doc: dict[str, Any], *, corpus: str | None = None) -> list[dict[str, Any]]:
    """Drift of every scored configuration that answered the benchmark in two or more epochs."""
    import sqlalchemy as sa

    from scoring.drift import drift
    from store.models import Answer, EngineConfig

    out = []
    seen: set[str] = set()
    for s in score_doc.get("systems") or []:
        h = s.get("config_hash")
        if not h or h in seen:
            continue
        seen.add(h)
        with db.session() as sess:
            n = sess.scalar(
                sa.select(sa.func.count(sa.distinct(Answer.epoch))).join(EngineConfig, EngineConfig.id == Answer.config_id)
                .where(EngineConfig.config_hash == h, ~Answer.superseded)
            )
        if n and n >= 2:
            out.append(drift(db, h, bench, corpus=corpus))
    return out


def _epoch(ep: dict[str, Any]) -> str:
    return f"epoch {ep.get('epoch')} ({ep.get('label')})"


def _one(doc: dict[str, Any], explorer: set[str]) -> str:
    o = doc.get("overall") or {}
    r = o.get("rbo") or {}
    ci = r.get("ci") or [None, None]
    paired = "".join(
        f'<tr><td>Δ {e(m)}</td><td class="num">{fmt(d.get("from"))} → {fmt(d.get("to"))}</td>'
        f'<td class="num">{fmt(d.get("diff"))}</td><td class="num">[{fmt((d.get("ci") or [None])[0])}, '
        f'{fmt((d.get("ci") or [None, None])[1])}]</td><td class="num">{fmt(d.get("p"), 4)}</td></tr>'
        for m, d in (o.get("paired") or {}).items()
    )
    overall = (
        '<table class="cmp"><thead><tr><th>measure</th><th class="num">value</th><th class="num">Δ</th>'
        '<th class="num">95% CI</th><th class="num">p</th></tr></thead><tbody>'
        f'<tr><td>mean RBO (p = {e(doc.get("p"))})</td><td class="num">{fmt(r.get("value"))}</td><td></td>'
        f'<td class="num">[{fmt(ci[0])}, {fmt(ci[1])}]</td><td></td></tr>'
        f'<tr><td>mean Jaccard@10</td><td class="num">{fmt(o.get("jaccard@10"))}</td><td></td><td></td><td></td></tr>'
        f'<tr><td>share with top 1 changed</td><td class="num">{fmt(o.get("top1_changed"))}</td><td></td><td></td><td></td></tr>'
        f'<tr><td>share with top 10 changed</td><td class="num">{fmt(o.get("top10_changed"))}</td><td></td><td></td><td></td></tr>'
        f"{paired}</tbody></table>"
    )
    from scoring.drift import gold_move

    rows = []
    for q in sorted(doc.get("per_query") or [], key=lambda q: (q.get("rbo") or 0.0, -gold_move(q), str(q.get("qid")))):
        qid = str(q.get("qid"))
        name = f'<a href="#q-{e(qid)}">{e(qid)}</a>' if qid in explorer else e(qid)
        gold = f"{q.get('gold_before') or '—'} → {q.get('gold_after') or '—'}"
        rows.append(
            f'<tr><td>{name}</td><td class="num" data-v="{q.get("rbo")}">{fmt(q.get("rbo"))}</td>'
            f'<td class="num">{fmt(q.get("jaccard@10"))}</td><td>{"yes" if q.get("top1_changed") else ""}</td>'
            f"<td>{e(gold)}</td><td>{'<br>'.join(e(x) for x in q.get('top_before') or [])}</td>"
            f"<td>{'<br>'.join(e(x) for x in q.get('top_after') or [])}</td></tr>"
        )
    return (
        f'<h3>{e(doc.get("label"))}: {e(_epoch(doc.get("from") or {}))} → {e(_epoch(doc.get("to") or {}))}</h3>'
        f'<p class="note">{e(doc.get("n_common"))} queries answered in both epochs '
        f'({e(doc.get("n_scored"))} with gold in the corpus for the metric differences, to − from, paired bootstrap).</p>'
        f"{overall}"
        '<div class="qwrap"><table class="queries sortable drift"><thead><tr><th data-sort="asc">query</th>'
        '<th class="num" data-sort="asc">RBO</th><th class="num">J@10</th><th>top 1 changed</th><th>gold before → after</th>'
        "<th>top 5 before</th><th>top 5 after</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
    )


def render_drift(score: dict[str, Any]) -> str:
    """The Drift section, or "" when no configuration has two epochs."""
    docs = score.get("drift") or []
    if not docs:
        return ""
    explorer = {str(q.get("qid")) for q in score.get("queries") or []}
    return (
        '<section id="drift"><h2>Drift</h2><p class="note">How a hosted engine changed between its two newest '
        "epochs: rank-biased overlap (RBO, extrapolated; Webber, Moffat &amp; Zobel 2010) of the returned lists, "
        "over first occurrences (a repeated hit keeps its slot), sorted with the most changed first "
        "(lowest RBO, then the largest move of the first gold position); a query id links to its row in the explorer.</p>"
        + "".join(_one(d, explorer) for d in docs) + "</section>"
    )
