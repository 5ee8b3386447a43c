"""What to do about a corpus a leaderboard bundle names but does not hold (issue 34, item 13):
the whole command, with absolute paths, for ``engines verify``'s error and for ``engines
publish``'s note when the bundle will need it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Iterable


def _q(value: Any) -> str:
    return shlex.quote(str(value))


def how_to_get(ref: dict[str, Any], bundle: str | Path) -> str:
    """The commands that give ``engines verify BUNDLE`` the corpus ``ref`` names."""
    bundle = Path(bundle).expanduser().resolve()
    src = str(ref.get("source") or "")
    name = ref.get("name") or "corpus"
    if src.startswith("hf://"):
        return (f"`engines corpus load {_q(src)} --name {_q(name)}` (it stays in the Hugging Face cache, where "
                f"verify finds it), then `engines verify {_q(bundle)}`; or `engines verify {_q(bundle)} "
                "--corpus FILE`")
    if src:
        path = Path(src).expanduser()  # a claim names the file, not the publisher's directories
        near = [path] if path.is_absolute() else [Path.cwd() / path, bundle.parent / path.name]
        found = next((c for c in near if c.is_file()), None)
        file = found.resolve() if found is not None else Path("/path/to") / path.name
        return f"`engines verify {_q(bundle)} --corpus {_q(file)}` (the file was published from {src})"
    return f"`engines verify {_q(bundle)} --corpus FILE`"


def shipped_sha256s() -> set[str]:
    """The sha256 of every corpus file shipped with the package (verify finds those itself)."""
    from pipelines.bundle_corpora import shipped_corpora
    from store.corpus import sha256_file

    return {sha256_file(p) for p in shipped_corpora()}


def publish_notes(corpora: Iterable[dict[str, Any]], bundle: str | Path) -> list[str]:
    """One note per corpus the bundle names without holding it (and the package does not ship)."""
    corpora = list(corpora)
    if not corpora:
        return []
    shipped = shipped_sha256s()
    return [f"note: the bundle names corpus {k.get('name')}@{k.get('revision')} (sha256 {str(k.get('sha256'))[:12]}…) "
            f"without holding it: verifying it will need that file, {how_to_get(k, bundle)}; "
            "publish with --with-corpus to put it in the bundle"
            for k in corpora if k.get("sha256") not in shipped]
