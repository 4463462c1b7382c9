"""`jsonfile.loads` and `canonical` against the `json` calls they stand for: the same values, the same errors."""

from __future__ import annotations

import json
import random

import pytest

from shou.jsonfile import canonical, loads

_TEXTS = [
    '{"a": 4, "b": 3}', "{}", "[]", "1", "-0.0", "1e400", "NaN", "-Infinity", '"x"', "true", "null",
    '{"a": 1, "a": 2}', '{"k": "\\ud800"}', '{"k": "caf\\u00e9", "é": [1, 2.5, {"z": null}]}', "99999999999999999999",
    # errors: empty, white space only, around the value, a byte-order mark, extra data, broken, unterminated
    "", " ", "\n", ' {"a": 1}', '{"a": 1} ', '{"a": 1}\n', "\t[1]\r", "\ufeff{}", "{} {}", "{}x", "[1] 2", "{} \n x",
    '{"a": 1', '{"a" 1}', "{'a': 1}", "[1,]", "tru", '"abc', "{\"a\": 1}\x0b", "\x0b{}", "\u3000{}", "{}\u3000",
    '{"a": nan}', "01", "[" * 50 + "]" * 50,
]


def _outcome(fn, text):
    try:
        return "ok", repr(fn(text))
    except json.JSONDecodeError as e:
        return "json", e.msg, e.pos, e.lineno, e.colno
    except (ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


def _fuzz(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    pieces = ['{', '}', '[', ']', '"a"', '"b"', ':', ',', ' ', '\n', '1', '-2.5e3', 'true', 'null', 'x', '"', '\\',
              '\ufeff', '\t']
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("text", _TEXTS)
def test_loads_is_json_loads(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


def test_loads_is_json_loads_on_random_texts() -> None:
    for text in _fuzz(35, 5000):
        assert _outcome(loads, text) == _outcome(json.loads, text), repr(text)


def test_too_deep_is_the_same_recursion_error() -> None:
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        loads(text)


@pytest.mark.parametrize("text", [t for t in _TEXTS if _outcome(json.loads, t)[0] == "ok"])
def test_canonical_is_json_dumps_sorted(text: str) -> None:
    value = json.loads(text)
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))
