"""The project's own docs (issue 22): every citation of METHODOLOGY.md, ENGINE-APIS.md or
BENCHMARKS.md in the repository resolves to docs/ — the file exists and holds the cited
section (``§2.7`` → a heading numbered 2.7; ``"Units that share a returned row"`` → a
heading with that text) — and the HTML report links its methodology to docs/METHODOLOGY.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.repo import tracked_files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("METHODOLOGY.md", "ENGINE-APIS.md", "BENCHMARKS.md")
CITE = re.compile(r"(METHODOLOGY|ENGINE-APIS|BENCHMARKS)\.md(?:[)`,:;]?\s*\(?(?:§\s?(\d+(?:\.\d+)?)|[\"“]([^\"”()]{3,60})[\"”]))?")


def headings(doc: str) -> list[str]:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def has_section(heads: list[str], number: str) -> bool:
    """A heading numbered ``number`` ("2.7 Rate limits"), or a range holding it ("4.1 – 4.2 …")."""
    for h in heads:
        m = re.match(r"(\d+(?:\.\d+)?)\.?(?:\s*[–-]\s*(\d+(?:\.\d+)?))?\s", h + " ")
        if not m:
            continue
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if number == lo or number == hi:
            return True
        if "." in number and "." in lo and number.split(".")[0] == lo.split(".")[0]:
            if float(lo.split(".")[1]) <= float(number.split(".")[1]) <= float(hi.split(".")[1]):
                return True
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_doc_exists(doc: str) -> None:
    assert (ROOT / "docs" / doc).is_file(), f"docs/{doc} is cited but missing"
    assert len(headings(doc)) >= 5


def test_every_citation_resolves() -> None:
    bad = []
    heads = {d: headings(d) for d in DOCS}
    for path in tracked_files():
        if path.suffix not in {".py", ".md", ".json", ".toml", ".html"} or path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in CITE.finditer(text):
            doc = m.group(1) + ".md"
            section, title = m.group(2), m.group(3) and " ".join(m.group(3).split())
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            if section and not has_section(heads[doc], section):
                bad.append(f"{where}: {doc} §{section}")
            if title and not any(title.lower() in h.lower() for h in heads[doc]):
                bad.append(f"{where}: {doc} \"{title}\"")
    assert not bad, "citations that docs/ does not hold:\n" + "\n".join(bad)


def test_readme_cites_the_docs_folder() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in DOCS:
        bare = re.findall(r"(?<![/\w-])" + re.escape(doc), readme)
        assert not bare, f"README cites {doc} without its folder: write docs/{doc}"
        assert f"docs/{doc}" in readme


def test_report_links_the_methodology() -> None:
    from scoring.report import METHODOLOGY_DOC, render_html

    assert (ROOT / METHODOLOGY_DOC).is_file()
    score = {"schema": "engines.score/1", "systems": [], "benchmark": {"name": "b"}, "corpus": {}, "k_max": 200,
             "bootstrap": {"resamples": 1000, "seed": 1, "ci": 0.95}}
    html = render_html(score)
    assert METHODOLOGY_DOC in html
