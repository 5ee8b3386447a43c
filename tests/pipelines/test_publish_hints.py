"""Issue 34, item 13: a bundle that names its corpus without holding it. ``engines verify``'s
error gives the whole command with absolute paths; ``engines publish`` without
``--with-corpus`` of a corpus the package does not ship says the bundle will need it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from cli.main import run as cli
from tests.support.publish import SUBSET, claim_of, source, verify  # noqa: F401  (module fixture)


def test_verify_hint_for_a_missing_corpus_is_the_absolute_command(source, capsys, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    bundle = Path(os.path.relpath(source["bare"], tmp_path))  # given relative: the hint is absolute
    code, out, err = verify(capsys, bundle)
    assert code == 2
    (line,) = err.strip().splitlines()
    want = f"engines verify {shlex.quote(str(source['bare'].resolve()))} --corpus {shlex.quote(str(source['corpus']))}"
    assert f"`{want}`" in line, line
    code, out, err = verify(capsys, *shlex.split(want)[2:])  # the hint, run as printed
    assert code == 0, out + err


def test_verify_hint_for_a_hugging_face_corpus_names_the_load_command(tmp_path):
    from pipelines.corpus_hint import how_to_get

    ref = {"name": "mathlib-4280", "source": "hf://FrenzyMath/lsv2-mathlib-v4.28.0-rc1-jsonl@c5f07cc71d42"}
    hint = how_to_get(ref, tmp_path / "lb.warc.gz")
    assert hint.startswith(f"`engines corpus load {ref['source']} --name mathlib-4280`")
    assert f"`engines verify {tmp_path / 'lb.warc.gz'}`" in hint


def test_publish_without_the_corpus_says_the_bundle_will_need_it(source, capsys, tmp_path):  # noqa: F811
    capsys.readouterr()
    out_file = tmp_path / "b.warc.gz"
    assert cli(["--db", source["url"], "publish", "--bench", "mathlibqr", "--subset", SUBSET,
                "--out", str(out_file)]) == 0
    err = capsys.readouterr().err
    notes = [ln for ln in err.splitlines() if ln.startswith("note: the bundle names corpus tiny@t1")]
    assert len(notes) == 1, err
    assert "--with-corpus" in notes[0] and f"--corpus {source['corpus']}" in notes[0]
    assert cli(["--db", source["url"], "publish", "--bench", "mathlibqr", "--subset", SUBSET, "--with-corpus",
                "--out", str(tmp_path / "c.warc.gz")]) == 0
    assert "note: the bundle names corpus" not in capsys.readouterr().err
