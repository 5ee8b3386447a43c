"""What a published bundle says of the publisher's own files (pipelines.publish): the name-list
files ``--shared-with`` / ``--snapshot`` give, an imported run's file, a corpus loaded from a
file, and the corpus files ``--with-corpus`` embeds. A bundle names them by their file names
alone, never by where they lie on the publisher's machine (a URL or ``hf://`` source is kept
whole); ``engines verify`` maps the names to the bundle's own records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines.bundle_corpora import find_corpus_file
from store.errors import InputError


def public_path(source: str) -> str:
    """A file's name, not its absolute path (a URL or an hf:// source whole)."""
    return source if "://" in source else Path(source).name


def public_corpus(k: dict[str, Any]) -> dict[str, Any]:
    return {**k, "source": public_path(k["source"])} if k.get("source") else k


def public_params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """A configuration's parameters with an imported run's ``source`` (not part of its
    identity) reduced to the file's name."""
    if not params or not params.get("source"):
        return params
    return {**params, "source": public_path(str(params["source"]))}


def name_files(file_specs: list[tuple[str, str]],
                options: dict[str, Any]) -> tuple[list[tuple[str, str, bytes]], dict[str, Any]]:
    """The name-list files' (role, name, bytes), and the options as the claim records them: each
    file named by its file name alone, and held once; two different files of one name are refused."""
    files, names = [], {}
    for role, spec in file_specs:
        p = Path(spec).expanduser()
        if not p.is_file():
            raise InputError(f"--{role} {spec}: the file does not exist, so it cannot go into the bundle")
        if p.name in names:  # one file for --shared-with and --snapshot travels once
            if names[p.name] != spec:
                raise InputError(f"--{role} {spec}: another name-list file has the name {p.name!r} "
                                 f"({names[p.name]}); the bundle names files by their names alone: rename one")
            continue
        names[p.name] = spec
        files.append((role, p.name, p.read_bytes()))
    rename = {spec: Path(spec).expanduser().name for _, spec in file_specs}
    recorded = dict(options)
    if options["shared_with"]:
        recorded["shared_with"] = [rename.get(x, x) for x in options["shared_with"]]
    if options["snapshots"]:
        recorded["snapshots"] = {k: rename.get(v, v) for k, v in options["snapshots"].items()}
    return files, recorded


def embedded_corpora(corpora: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Path]]:
    """``--with-corpus``: each corpus with its file on this machine (found by sha256)."""
    embed: list[tuple[dict[str, Any], Path]] = []
    for k in corpora:
        found = find_corpus_file(k["sha256"], k["source"])
        if found is None:
            raise InputError(f"--with-corpus: the file of corpus {k['name']}@{k['revision']} (sha256 "
                             f"{k['sha256'][:12]}…, loaded from {k['source']}) is not on this machine; "
                             "put it back at that path (or in ENGINES_CACHE_DIR/corpora/), or publish without --with-corpus")
        embed.append((k, found))
    return embed
