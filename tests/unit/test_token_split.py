"""The ASCII split of `context/tokens.py` against tiktoken's own: the same pieces, so the same tokens and counts."""

from __future__ import annotations

import random
import re

import pytest

from shou.context import tokens

pytest.importorskip("tiktoken")

# Every kind of character the patterns tell apart, weighted to make their boundaries meet often: letters of both
# cases, digits, the six white spaces and the separators Python's `\s` adds, apostrophes and the contractions'
# letters, punctuation, `/` (o200k's), and a few whole words.
_ALPHABET = (list("aAbBsSdDmMtTlLvVrReE") + list("0123456789") + [" ", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c"]
             + ["\x1c", "\x1d", "\x1e", "\x1f", "\x00", "\x7f"] + ["'", "'", "'s", "'LL", "'Re", "'ve", "'d", "'M"]
             + list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["/", "\r\n", "  \n", "hello", "World", "HTML", "x1"])


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", " \n", "a ", "a  ", "a \n", "it's", "IT'S", "don't  stop\n\n", "x\x0b\x0cy", "1234567",
           '{"a": 4, "b": 3}', "[task:tp1-7 a=2 b=3 c=4] Compute (2 + 3) * 4: call add first.", "a\n", "a  \n", "\t\t"]
    for _ in range(n):
        out.append("".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 40))))
    return out


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_ascii_split_gives_tiktokens_tokens(name: str) -> None:
    enc = tokens.load_encoding(name)
    split = re.compile(tokens._ASCII_SPLIT[name]).findall
    merge = enc._core_bpe.encode_single_piece
    for text in _texts(35, 4000):
        assert [t for piece in split(text) for t in merge(piece.encode("ascii"))] == enc.encode_ordinary(text), text


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_counter_counts_as_tiktoken_does(name: str) -> None:
    enc = tokens.load_encoding(name)
    count = tokens._counter(enc, name)
    texts = [*_texts(49, 1500), "naïve café ünïcode", "日本語のテキスト", "emoji 🙂 and text", "\ud800 lone surrogate"]
    for text in texts * 2:  # the second time from the table of pieces
        assert count(text) == len(enc.encode(text, disallowed_special=())), text


def test_a_full_table_of_pieces_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "MOST_PIECES", 3)
    enc = tokens.load_encoding("cl100k_base")
    count = tokens._counter(enc, "cl100k_base")
    for text in _texts(7, 50):
        assert count(text) == len(enc.encode_ordinary(text))
