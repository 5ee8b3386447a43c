"""The report's per-query explorer: one row per query (the dropped ones included), the
rank at which each system returned its gold, and the filters above the table."""

from __future__ import annotations

from typing import Any

from scoring.report.common import e, header


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


def with_dropped(score: dict[str, Any], queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def explorer(systems: list[dict[str, Any]], queries: list[dict[str, Any]]) -> str:
    per_query = [s.get("per_query") or {} for s in systems]
    head = "".join(header(s, "asc") for s in systems)
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

