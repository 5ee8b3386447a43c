"""The report's Methodology section: the constants the scorer recorded in the score
document, the definitions behind every figure, and the table of systems."""

from __future__ import annotations

import json
from typing import Any, Iterable

from scoring.report.common import e
from scoring.view import label as system_label


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


def methodology(score: dict[str, Any], systems: list[dict[str, Any]], json_sha: str) -> str:
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

