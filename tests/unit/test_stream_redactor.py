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


def test_a_json_escaped_secret_split_across_pieces_is_held_and_hidden() -> None:
    """The carry-over is the longest spelling's: `p\\u00e4ssw\\u00f6rt...` is longer than the secret itself."""
    import json

    from shou.redact import Redactor
    from shou.redact_stream import StreamRedactor

    secret, quoted = "pässwört-Geheim-4242", 'Pa"ss\\wd-Split99xyz'
    text = json.dumps({"expression": f"1 # {secret} and {quoted}"})
    for size in (1, 2, 3, 5, 7):
        stream = StreamRedactor(Redactor([secret, quoted]))
        out = "".join(stream.feed(text[i:i + size]) for i in range(0, len(text), size)) + stream.end()
        assert "Geheim" not in out and "Split99xyz" not in out and out.count("[redacted]") == 2, out
