"""A served file's known secrets are found in other encodings too (`Redactor.in_bytes`, shou.redact_encoded):
UTF-16/32 at any byte offset, base64 at any of the 3 offsets of a longer stream (standard or URL-safe, padded
or not, split by line breaks), hex and percent-encoding in any case, reversed. Before, only the secret as
written (or JSON-escaped) was replaced, so a program that read the workspace's `.env` could write its key out
as `base64 .env > notes.txt` and the files API handed it to any token holder."""

from __future__ import annotations

import base64
import codecs
import os
import random
from pathlib import Path
from urllib.parse import quote, quote_plus

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shou.redact import Redactor

KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=:@!$"
keys = st.text(alphabet=KEY_CHARS, min_size=8, max_size=80)
any_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=8, max_size=40)
secrets = st.one_of(keys, keys, any_text)
around = st.binary(max_size=200)
CODECS = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-le": codecs.BOM_UTF32_LE,
          "utf-32-be": codecs.BOM_UTF32_BE}


def joined(data: bytes) -> bytes:
    return data.replace(b"\r", b"").replace(b"\n", b"")


@settings(max_examples=300, deadline=None)
@given(secrets, around, around, st.sampled_from(sorted(CODECS)), st.booleans(), st.text(max_size=5),
       st.text(max_size=5))
def test_a_secret_in_utf16_or_utf32_is_found_at_any_offset_with_or_without_a_bom(
        secret: str, before: bytes, after: bytes, codec: str, bom: bool, left: str, right: str) -> None:
    line = left + secret + right
    assume(line.find(secret) == len(left) and line.find(secret, len(left) + 1) < 0 and "[redacted]" not in line)
    spelled = secret.encode(codec)
    text = (CODECS[codec] if bom else b"") + (left + secret + right).encode(codec)
    out = Redactor([secret]).in_bytes(before + text + after)
    assert spelled not in out
    # A whole file in that encoding stays one (its LE spelling after "KEY=" is also its BE one a byte early)
    out = Redactor([secret]).in_bytes(text)
    assert out == (CODECS[codec] if bom else b"") + (left + "[redacted]" + right).encode(codec)


@settings(max_examples=400, deadline=None)
@given(secrets, st.binary(max_size=40), st.binary(max_size=40), around, around, st.booleans(), st.booleans(),
       st.sampled_from([0, 76, 64, 5]), st.sampled_from([b"\n", b"\r\n", b"\n    ", b" "]))
def test_a_secret_in_a_base64_stream_is_hidden_whole_groups_at_a_time(
        secret: str, head: bytes, tail: bytes, before: bytes, after: bytes, url: bool, unpadded: bool,
        width: int, gap: bytes) -> None:
    raw = secret.encode()
    payload = head + raw + tail
    stream = base64.urlsafe_b64encode(payload) if url else base64.b64encode(payload)
    if unpadded:
        stream = stream.rstrip(b"=")
    if width:  # MIME's 76 columns, PEM's 64, a YAML block's indentation: the key split across them
        stream = gap.join(stream[i:i + width] for i in range(0, len(stream), width))
    assume(raw not in stream and raw[::-1] not in stream)  # "AAAAAAAA" is also the plain spelling of zeros
    assume(raw not in b"[redacted]" * 20)  # what the key's groups decode to afterwards
    # A key that repeats itself ("00000000", "abababab") is also found at another offset, a group early or late
    assume(all(raw[p:] != raw[:-p] for p in range(1, len(raw) - 5)))
    data = before + stream + after
    out = Redactor([secret]).in_bytes(data)
    assert len(out) == len(data) and out[:len(before)] == before
    region = out[len(before):len(before) + len(stream)]
    assert [i for i, c in enumerate(region) if c in b"\r\n =\t"] == \
        [i for i, c in enumerate(stream) if c in b"\r\n =\t"]  # the layout kept
    flat = joined(region).replace(b" ", b"").rstrip(b"=")
    decoded = base64.b64decode(flat + b"=" * (-len(flat) % 4), altchars=b"-_" if url else None)
    assert raw not in decoded
    first, last = 3 * (len(head) // 3), 3 * -(-(len(head) + len(raw)) // 3)  # the groups that held the key
    assert decoded[:first] == payload[:first] and decoded[last:] == payload[last:]
    hidden = decoded[first:last]  # what they decode to now says so
    assert hidden and hidden == (b"[redacted]" * 20)[:len(hidden)]


@settings(max_examples=300, deadline=None)
@given(secrets, around, around, st.randoms(use_true_random=False), st.sampled_from([0, 60, 32, 2]),
       st.sampled_from([b"\n", b" ", b"\r\n"]))
def test_a_secret_in_hex_is_found_in_any_case_and_across_line_breaks(
        secret: str, before: bytes, after: bytes, rnd: random.Random, width: int, gap: bytes) -> None:
    hexed = "".join(c.upper() if rnd.random() < 0.5 else c for c in secret.encode().hex()).encode()
    if width:  # `xxd -p` writes 60 columns; `73 6b 2d` a byte at a time
        hexed = gap.join(hexed[i:i + width] for i in range(0, len(hexed), width))
    out = Redactor([secret]).in_bytes(before + hexed + after)
    assert secret.encode().hex().encode() not in joined(out).replace(b" ", b"").lower()


@settings(max_examples=300, deadline=None)
@given(secrets, around, around, st.randoms(use_true_random=False))
def test_a_secret_percent_encoded_or_reversed_is_found(secret: str, before: bytes, after: bytes,
                                                        rnd: random.Random) -> None:
    raw = secret.encode()
    every = "".join(f"%{b:02x}" if rnd.random() < 0.5 else f"%{b:02X}" for b in raw).encode()
    forms = [every, quote(raw, safe="").encode(), quote(raw).encode(), quote_plus(raw).encode(), raw[::-1]]
    r = Redactor([secret])
    for form in forms:
        out = r.in_bytes(before + form + after)
        assert form not in out, form
    assert every.lower() not in r.in_bytes(before + every + after).lower()


def test_a_key_broken_across_lines_is_found_far_into_a_big_file() -> None:
    # Where the gaps were is worked out a 64 KB chunk at a time: keys around and across chunk boundaries.
    key = "ghp_0123456789abcdefABCDEF0123456789ab"
    for filler_size in (65_536 - 30, 65_536 - 3, 65_536, 3 * 65_536 + 11):
        filler = (b"some words and\tspaces\n" * 20_000)[:filler_size]
        wrapped = b"\n  ".join(base64.b64encode(b"xyz" * 30 + key.encode())[i:i + 20] for i in range(0, 200, 20))
        data = filler + wrapped + b"\n" + filler
        out = Redactor([key]).in_bytes(data)
        assert len(out) == len(data) and out[:len(filler)] == filler and out.endswith(b"\n" + filler)
        region = out[len(filler):len(filler) + len(wrapped)]
        assert key.encode() not in base64.b64decode(region.replace(b"\n  ", b""))
        assert [i for i, c in enumerate(region) if c in b"\n "] == [i for i, c in enumerate(wrapped) if c in b"\n "]


def test_every_encoding_at_once_in_one_file_and_the_rest_of_it_kept() -> None:
    key = "sk-proj-Zx9/Qw+Er7_Ty-Ui0"
    raw = key.encode()
    parts = [b"plain " + raw, key.encode("utf-16-le"), base64.b64encode(b"ab" + raw), base64.urlsafe_b64encode(raw),
             raw.hex().upper().encode(), quote(raw, safe="").encode(), raw[::-1], b"the end\n"]
    out = Redactor([key]).in_bytes(b"\n".join(parts))
    for part in parts[:-1]:
        assert part not in out
    assert out.startswith(b"plain [redacted]\n") and out.endswith(b"\nthe end\n")


def test_a_file_without_the_secret_comes_back_as_the_same_object() -> None:
    # False hits would blank out bytes nobody hid anything in: shou's own sources, random bytes, base64 and hex
    # of random bytes, UTF-16 text, with keys of the usual shapes.
    r = Redactor(["sk-proj-" + "Ab1_" * 12, "ghp_0123456789abcdefABCDEF0123456789ab", "hunter22hunter22",
                  "postgres://user:pa55word@db/x"])
    rnd = random.Random(7)
    blobs = [os.urandom(1 << 20), base64.encodebytes(os.urandom(1 << 19)), os.urandom(1 << 18).hex().encode()]
    src = Path(__file__).resolve().parents[2] / "src" / "shou"
    text = b"".join(p.read_bytes() for p in sorted(src.rglob("*.py")))
    blobs += [text, text.decode().encode("utf-16-le"), bytes(rnd.getrandbits(8) for _ in range(4096))]
    for blob in blobs:
        assert r.in_bytes(blob) is blob


def test_only_serving_a_file_makes_the_encoded_spellings() -> None:
    from shou.events import ToolCallFinished

    r = Redactor(["sk-live-0123456789abcdef"])
    r.checked(ToolCallFinished("r", 1, "c1", "shell", "out sk-live-0123456789abcdef"))
    assert r._encoded is None  # every event passes through checked(): it costs what it did
    assert r.in_bytes(b"nothing here") == b"nothing here" and r._encoded is not None


def test_a_file_holding_a_key_encoded_past_the_limit_is_withheld_whole() -> None:
    # Review 49, F3: a file of back-to-back spaced hex of the key took 3.7 s of CPU to fill match by match.
    from shou.redact import Redactor
    from shou.redact_encoded import MOST_MATCHES, WITHHELD

    key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    spaced = " ".join(f"{b:02x}" for b in key.encode()).encode() + b"\n"
    r = Redactor([key])
    assert r.in_bytes(spaced * (MOST_MATCHES + 1)) == WITHHELD
    some = r.in_bytes(b"head\n" + spaced * 100)
    assert some.startswith(b"head\n") and key.encode().hex().encode() not in some.replace(b" ", b"")
    assert len(some) == len(b"head\n" + spaced * 100)


def test_a_file_of_long_matches_full_of_gaps_is_withheld_at_once() -> None:
    # Review 49b, B5: 9,600 matches of a key's hex, each spread over 2 KB of line breaks, stayed under the match
    # cap and took 4-5 s to map and fill.
    from shou.redact import Redactor
    from shou.redact_encoded import WITHHELD

    key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    unit = (b"\n" * 24).join(bytes([c]) for c in key.encode().hex().encode()) + b"\n"
    assert Redactor([key]).in_bytes(unit * 9_000) == WITHHELD
    one = Redactor([key]).in_bytes(b"x" * 1000 + unit + b"y" * 1000)  # one such match is simply redacted
    assert key.encode().hex().encode() not in one.replace(b"\n", b"") and len(one) == 2000 + len(unit)
