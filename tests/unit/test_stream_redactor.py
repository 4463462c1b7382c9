"""`StreamRedactor`: a text that arrives in pieces comes out as `Redactor.text` of the whole, wherever it is cut."""

from __future__ import annotations

import itertools

from shou.redact import Redactor
from shou.redact_stream import StreamRedactor

SECRETS = ["sk-live-abcdef123456", "abcdef12"]  # one holds the start of the other


def _through(pieces: list[str]) -> list[str]:
    stream = StreamRedactor(Redactor(SECRETS))
    return [*(stream.feed(p) for p in pieces), stream.end()]


def test_every_cut_of_a_text_gives_the_redaction_of_the_whole() -> None:
    text = "a sk-live-abcdef123456 b abcdef12 c sk-live-abc d"
    whole = Redactor(SECRETS).text(text)
    assert "sk-live-abcdef123456" not in whole and "abcdef12" not in whole
    for i, j in itertools.combinations(range(1, len(text)), 2):
        out = _through([text[:i], text[i:j], text[j:]])
        assert "".join(out) == whole, (i, j)


def test_only_what_could_start_a_secret_is_held_back() -> None:
    out = _through(["hello wor", "ld, sk-l", "ive-abcdef123456!"])
    assert out == ["hello wor", "ld, ", "[redacted]!", ""]
    assert _through(["no secrets here"]) == ["no secrets here", ""]
    assert StreamRedactor(Redactor([])).feed("anything sk-") == "anything sk-"
