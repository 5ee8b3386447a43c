"""The archive's JSON decoder (engines.jsonbody.decode_json_body) uses orjson when it gives
exactly what json.loads gives, and json.loads otherwise: re-parsing archived bodies must
never change an answer because a faster decoder was used."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engines import jsonbody
from engines.base import EngineParseError, decode_json_body
from store.text import clean_json

DATA = Path(__file__).resolve().parents[1] / "data" / "real-responses"
H = {"content-type": "application/json"}


def _same(a, b) -> bool:
    """Equal values of equal types, down to -0.0 vs 0.0, NaN and key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_orjson_is_used() -> None:
    # The fast path exists (a dependency), so the tests below compare two decoders.
    assert jsonbody._orjson is not None


@pytest.mark.parametrize("path", sorted(DATA.glob("*/*.json")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_bodies_decode_as_json_loads(path: Path) -> None:
    body = path.read_bytes()
    assert _same(decode_json_body("t", 200, H, body), json.loads(body.decode("utf-8")))


EDGES = [
    b'{"n": 12345678901234567890123}',  # beyond 64 bits
    b'{"n": -9223372036854775809}',
    b'{"n": 18446744073709551616}',
    b'{"n": 9223372036854775807}',
    b'{"x": 0.1000000000000000055511151231257827}',  # more digits than a double
    b'{"x": 1.00000000000000000000000000001}',
    b'{"x": 3.141592653589793238462643383279}',
    b'[-0.0, 0.0, -0, 1e-320, 2.2250738585072014e-308, 1.7976931348623157e308, 5e-324]',
    b'[1e400, -1e400]',
    b'[NaN, Infinity, -Infinity]',
    b'{"a": 1, "a": 2, "b": {"c": 1, "c": [3]}}',  # duplicate keys: the last wins
    b'["\\ud800", "\\udc00x", "\\ud83d\\ude00", "\\u00e9"]',  # lone and paired surrogates
    '["é", "ℕ", "∀ x, x ≤ x"]'.encode(),
    b'  [1, 2]  \n',
    b'{"deep": ' + b'[' * 200 + b']' * 200 + b'}',
    b'{"x": 1E2, "y": 1e-2, "z": 10.0, "w": 123456789012345678}',
]


@pytest.mark.parametrize("body", EDGES)
def test_edge_cases_decode_as_json_loads(body: bytes) -> None:
    # What json.loads gives, with the stored-text rule of the parse path applied (a lone
    # surrogate or NUL becomes U+FFFD: store.text.clean_json), on either decoder.
    assert _same(decode_json_body("t", 200, H, body), clean_json(json.loads(body.decode("utf-8"))))


@pytest.mark.parametrize("body", [
    b'[1, 2', b'{"a": 1,, "b": 2}', b'[1, 2] x', b'["tab\there"]', b'["\xff"]', '\ufeff[1]'.encode(), b'[1, 2]\x00',
    b'{"a": 1', b'"unterminated', b'[1e400, "\xff"]',
])
def test_errors_are_those_of_json_loads(body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EngineParseError) as fast:
        decode_json_body("t", 200, H, body)
    monkeypatch.setattr(jsonbody, "_orjson", None)  # json.loads alone, as before orjson
    with pytest.raises(EngineParseError) as slow:
        decode_json_body("t", 200, H, body)
    assert str(fast.value) == str(slow.value)


def test_not_utf8_and_bom() -> None:
    with pytest.raises(EngineParseError, match="not UTF-8"):
        decode_json_body("t", 200, H, b'["\xff"]')
    with pytest.raises(EngineParseError, match="malformed JSON at char 0: Unexpected UTF-8 BOM"):
        decode_json_body("t", 200, H, '\ufeff[1]'.encode())
