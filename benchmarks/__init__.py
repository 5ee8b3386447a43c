"""Benchmark data shipped with the package (copied byte for byte; see PROVENANCE.md).

``KNOWN_FILES`` pins every shipped file by sha256: the loader refuses a file that
parses as one of these benchmarks but hashes differently, unless told otherwise.
"""

from __future__ import annotations

from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent

# sha256 -> (canonical name, format). Hashes from PROVENANCE.md.
KNOWN_FILES: dict[str, tuple[str, str]] = {
    "0ce093ebb9da90c046d10b4e50a901edd8237a5aef357df1a3e08f5f5c1a1294": ("mathlibqr", "mathlibqr"),
    "a57a0048bdd14c5a9f5815a51846163b9c3fd059fe8ea529651dc6af02a35962": ("shared171", "shared171"),
    "91a52d4998e81663effcf94cfe72908054577a2a9c16ddd7b32bc61657f4f9a7": ("mathlibmpr", "mathlibmpr"),
    "4c53d9edbe5dcbcf84d9e687f0a292b8dcc6d162c24a71abc84a0d3a0655f4cc": ("mathlibmpr-prop", "id-list"),
}

SHIPPED_FILES = (
    "MathlibQR.json",
    "MathlibMPR.json",
    "MathlibQR_shared171.json",
    "MathlibMPR_Prop_ids.txt",
)


# The real Mathlib slice (11,651 declarations extracted from source; development data,
# not a benchmark corpus): see data/mathlib-slice/PROVENANCE.md.
SLICE_CORPUS = SHIPPED_DIR / "data" / "mathlib-slice" / "declarations.jsonl"
SLICE_CORPUS_NAME = "mathlib-slice"
SLICE_CORPUS_REVISION = "028964f2c6f0"  # mathlib4 commit the slice was extracted at


def shipped_path(name: str) -> Path:
    return SHIPPED_DIR / name
