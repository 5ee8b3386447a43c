"""The lsv2-compat renderer: golden strings (BENCHMARKS.md §6.5 verbatim) for every kind branch."""

from __future__ import annotations

import hashlib
import json

import pytest

from engines.local import render
from engines.local.render import DESCRIPTION_LIMIT, render_lsv2, renderer_hash

THEOREM_ROW = {
    "name": ["Function", "Bijective", "injective"],
    "module_name": ["Mathlib", "Logic", "Function", "Basic"],
    "kind": "theorem",
    "type": "∀ {α : Sort u_1} {β : Sort u_2} {f : α → β}, Function.Bijective f → Function.Injective f",
    "index": 0,
    "signature": " {f : α → β} (hf : Bijective f) : Injective f",
    "value": ":= hf.1",
    "informal_name": "Bijectivity Implies Injectivity",
    "informal_description": "For any function $f \\colon \\alpha \\to \\beta$, if $f$ is bijective, then $f$ is injective.",
}

# The three worked examples of BENCHMARKS.md §6.5, as the Python literals printed there.
THEOREM_GOLDEN = "Represent the following mathematical theorem in lean repository for semantic search: \n Informal content: \n ['theorem']: Bijectivity Implies Injectivity: For any function $f \\colon \\alpha \\to \\beta$, if $f$ is bijective, then $f$ is injective. \n Formal content: \n Function.Bijective.injective ∀ {α : Sort u_1} {β : Sort u_2} {f : α → β}, Function.Bijective f → Function.Injective f := by sorry"
INSTANCE_GOLDEN = "Represent the following typeclass instance in lean repository for semantic search: \n Informal content: \n ['instance']: Successor preserves the less-than relation for natural numbers: For natural numbers $m$ and $n$, if $m < n$ holds, then $\\mathrm{succ}(m) < \\mathrm{succ}(n)$ also holds. \n Formal content: \n Fin2.IsLT.succ ∀ (m n : ℕ) [l : Fin2.IsLT m n], Fin2.IsLT m.succ n.succ :=\n  ⟨succ_lt_succ l.h⟩"
STRUCTURE_GOLDEN = "Represent the following lean content for semantic search: \n Informal content: \n ['structure']:  \n Formal content: \n Lattice Type u → Type u := by sorry"

INSTANCE_ROW = {
    "name": ["Fin2", "IsLT", "succ"],
    "kind": "instance",
    "type": "∀ (m n : ℕ) [l : Fin2.IsLT m n], Fin2.IsLT m.succ n.succ",
    "value": ":=\n  ⟨succ_lt_succ l.h⟩",
    "informal_name": "Successor preserves the less-than relation for natural numbers",
    "informal_description": "For natural numbers $m$ and $n$, if $m < n$ holds, then $\\mathrm{succ}(m) < \\mathrm{succ}(n)$ also holds.",
}
STRUCTURE_ROW = {"name": ["Lattice"], "kind": "structure", "type": "Type u → Type u",
                 "informal_name": "", "informal_description": ""}


def test_theorem_golden_ignores_value() -> None:
    assert render_lsv2(THEOREM_ROW) == THEOREM_GOLDEN


def test_instance_golden_uses_value_branch() -> None:
    assert render_lsv2(INSTANCE_ROW) == INSTANCE_GOLDEN


def test_other_kind_with_empty_informal_fields_golden() -> None:
    assert render_lsv2(STRUCTURE_ROW) == STRUCTURE_GOLDEN
    # the edge case of §6.3 step 5: two spaces after the kind prefix
    assert "['structure']:  \n" in render_lsv2(STRUCTURE_ROW)


def test_definition_with_value_and_without() -> None:
    row = {"name": ["Nat", "double"], "kind": "definition", "type": "ℕ → ℕ", "value": ":= fun n => n + n",
           "informal_name": "Doubling", "informal_description": "Twice $n$."}
    assert render_lsv2(row) == (
        "Represent the following mathematical definition in lean repository for semantic search: \n"
        " Informal content: \n ['definition']: Doubling: Twice $n$. \n Formal content: \n"
        " Nat.double ℕ → ℕ := fun n => n + n"
    )
    row["value"] = ""
    assert render_lsv2(row).endswith(" \n Formal content: \n Nat.double ℕ → ℕ := by sorry")


@pytest.mark.parametrize("kind", ["abbrev", "class", "inductive", "opaque", "axiom"])
def test_other_kinds_use_generic_header_and_sorry(kind: str) -> None:
    row = {"name": ["X", "y"], "kind": kind, "type": "Prop", "value": ":= True", "informal_name": "Why"}
    assert render_lsv2(row) == (
        f"Represent the following lean content for semantic search: \n Informal content: \n"
        f" ['{kind}']: Why \n Formal content: \n X.y Prop := by sorry"
    )


def test_missing_kind_has_no_prefix_and_generic_header() -> None:
    row = {"name": ["foo"], "informal_name": "Foo", "informal_description": "Bar."}
    assert render_lsv2(row) == (
        "Represent the following lean content for semantic search: \n Informal content: \n Foo: Bar. "
        "\n Formal content: \n foo := by sorry"
    )


def test_extracted_corpus_row_with_nulls() -> None:
    # The shape of benchmarks/data/mathlib-slice rows: type/value/informal fields are null.
    line = '{"name": ["ProbabilityTheory", "cond"], "kind": "definition", "signature": "(s : Set Ω) : Measure Ω", ' \
           '"type": null, "value": null, "docstring": "doc", "informal_name": null, "informal_description": null}'
    assert render_lsv2(json.loads(line)) == (
        "Represent the following mathematical definition in lean repository for semantic search: \n"
        " Informal content: \n ['definition']:  \n Formal content: \n ProbabilityTheory.cond := by sorry"
    )


def test_description_truncated_name_not() -> None:
    long_name = "N" * (DESCRIPTION_LIMIT + 50)
    row = {"name": ["a"], "kind": "theorem", "informal_name": long_name,
           "informal_description": "x" * DESCRIPTION_LIMIT + "TAIL"}
    text = render_lsv2(row)
    assert f"['theorem']: {long_name}: {'x' * DESCRIPTION_LIMIT}...(truncated) \n" in text
    assert "TAIL" not in text
    row["informal_description"] = "x" * DESCRIPTION_LIMIT  # exactly at the limit: untouched
    assert "(truncated)" not in render_lsv2(row)


def test_string_name_is_split_not_spelled_out() -> None:
    row = dict(INSTANCE_ROW, name="Fin2.IsLT.succ")
    assert render_lsv2(row) == INSTANCE_GOLDEN
    assert "F.i.n" not in render_lsv2(row)


def test_kind_with_quote_uses_python_list_repr() -> None:
    # str([kind]) switches to double quotes when the kind holds a single quote: keep that quirk.
    row = {"name": ["a"], "kind": "it's"}
    assert "[\"it's\"]:  \n" in render_lsv2(row)


def test_renderer_hash_is_sha256_of_the_module_source() -> None:
    with open(render.__file__, "rb") as fh:
        assert renderer_hash() == hashlib.sha256(fh.read()).hexdigest()
    assert render.RENDERER_NAME == "lsv2-compat"
