"""Where a corpus file comes from: a local path or a pinned ``hf://`` dataset file, and its digest.

A corpus is identified by (name, revision, sha256 of the file); :func:`resolve_source`
turns what the user passed into a file on local disk, :func:`sha256_file` digests it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from store.errors import InputError

HF_PATTERN = re.compile(r"^hf://(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<rev>[^/\s]+))?(?:/(?P<path>\S+))?$")


@dataclass(frozen=True)
class CorpusSource:
    """A resolved corpus file on local disk, with where it came from."""

    path: Path
    display: str  # what the user passed (hf:// spec or path)
    revision: str | None  # the hub revision, when there is one



def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def resolve_source(src: str, *, download_dir: Path | None = None) -> CorpusSource:
    """Turn ``SRC`` into a local file: a path, or ``hf://OWNER/DATASET@REVISION[/FILE]``."""
    if src.startswith("hf://"):
        return _resolve_hf(src, download_dir=download_dir)
    path = Path(src).expanduser()
    if not path.exists():
        raise InputError(f"corpus file {src} does not exist; pass a .jsonl, .jsonl.gz or hf://OWNER/DATASET@REVISION")
    if path.is_dir():
        raise InputError(f"corpus source {src} is a directory; pass the .jsonl or .jsonl.gz file inside it")
    from store.sniff import refuse_other_kinds

    refuse_other_kinds(path, ("corpus",), "a corpus")
    return CorpusSource(path=path, display=src, revision=None)


def _resolve_hf(src: str, *, download_dir: Path | None) -> CorpusSource:
    m = HF_PATTERN.match(src)
    if not m:
        raise InputError(f"cannot parse {src!r}; expected hf://OWNER/DATASET@REVISION (optionally /FILE.jsonl)")
    repo, rev, fname = m.group("repo"), m.group("rev"), m.group("path")
    if not rev:
        raise InputError(
            f"{src}: a pinned revision is required (hf://{repo}@<commit>), so an upstream re-upload cannot change scores"
        )
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise InputError("hf:// sources need huggingface_hub: pip install 'engines[hf]'") from None
    # The dataset's file name is not documented (BENCHMARKS.md §5.1): list and pick, never guess.
    patterns = [fname] if fname else ["*.jsonl", "*.jsonl.gz", "**/*.jsonl", "**/*.jsonl.gz"]
    try:
        folder = snapshot_download(
            repo_id=repo,
            repo_type="dataset",
            revision=rev,
            allow_patterns=patterns,
            local_dir=str(download_dir) if download_dir else None,
        )
    except LocalEntryNotFoundError as exc:
        raise InputError(f"{src}: not in the local Hugging Face cache and the hub is unreachable ({exc})") from None
    except HfHubHTTPError as exc:
        raise InputError(f"{src}: Hugging Face hub refused the download: {str(exc).splitlines()[0]}") from None
    files = sorted(
        p for p in Path(folder).rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz"))
    )
    if fname:
        files = [p for p in files if p.relative_to(folder).as_posix() == fname]
    if not files:
        raise InputError(f"{src}: the dataset at revision {rev} has no .jsonl/.jsonl.gz file")
    if len(files) > 1:
        names = ", ".join(p.relative_to(folder).as_posix() for p in files)
        raise InputError(f"{src}: several corpus files ({names}); name one as hf://{repo}@{rev}/FILE")
    return CorpusSource(path=files[0], display=src, revision=rev)
