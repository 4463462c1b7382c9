"""Known secrets in a served file's bytes as other encodings spell them: what `Redactor.in_bytes` hides besides
the secret as written (the files API and A2A artifacts hand a workspace's files to whoever holds a token, and
a program in the sandbox can read the workspace's `.env` and write its keys back in any encoding).

Each known value (as `Redactor.values` holds it: plain and JSON-escaped) is looked for as:

- UTF-16 and UTF-32, little- and big-endian (a byte order mark changes nothing: it is not part of the match),
  at any byte offset; replaced by `[redacted]` in the same encoding. A spelling holding NULs is only searched
  in a file that holds them too (a UTF-8 text file costs nothing more; a UTF-16 one nothing for UTF-32);
- reversed; replaced by `[redacted]`;
- percent-encoded as URLs write it (`quote`, `quote_plus`) or every byte (`%73%6B...`), in any case (so a
  key's letters around its `%2F` are matched in any case too); replaced by `[redacted]`;
- hex (either case, mixed too); replaced by as many hex digits of `[redacted][redacted]...` (the file keeps its
  layout and still decodes);
- hex and percent also split by line breaks and spaces (`xxd -p`, `73 6b 2d`);
- base64, standard and URL-safe, with the secret at any of the 3 byte offsets in a longer stream, padded or
  not, also split by line breaks and indentation (MIME's 76 columns, PEM's 64, a YAML block): the characters
  that only the secret's bytes determine are matched, and every 4-character group holding any of its bits is
  replaced by base64 of `[redacted][redacted]...`, same length, line breaks, spaces and padding kept: nothing
  of the secret can be decoded from what is left, and the stream still decodes.

Cost: one substring search of the file per needle (about 2 ms per 10 MB), and two copies of the file (without
line breaks, tabs and spaces; that, lowercased) for the base64 and hex needles. Where those gaps were is
worked out only when something matched there, and only in the 64 KB around each match.
"""

from __future__ import annotations

import base64
import bisect
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus

__all__ = ["MOST_BYTES", "MOST_GAPS", "MOST_MATCHES", "WITHHELD", "EncodedSecrets"]

_REDACTED = b"[redacted]"
MOST_MATCHES = 10_000  # encoded secrets in one file past which it is withheld whole
MOST_BYTES = 1 << 20  # or bytes they cover
MOST_GAPS = 1 << 21  # or line breaks and spaces in the 64 KB chunks they end in
WITHHELD = (b"[redacted: this file holds the server's secrets, encoded, in more than 10,000 places or 1 MiB; it is "
            b"not served]\n")
# What a base64 or hex stream may be broken by: line breaks (MIME's 76 columns), and the indentation and
# spaces of a YAML block or a hex dump; matched without them, kept where they are.
_GAPS = b"\r\n\t "
_GAP = re.compile(rb"[\r\n\t ]")
_CHUNK = 1 << 16
# Both alphabets: a key whose base64 holds none of `+/-_` has one needle for both (only the stream's own
# characters within the key's groups are ever taken).
_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_TEXT_CODECS = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
# The first character of a base64 stream that only the secret's bytes determine, by the secret's offset in
# its 3-byte group (0: from its first character; 1: its third; 2: its fourth).
_FIRST_WHOLE = (0, 2, 3)

_PASSES = 4  # searches of a file whose matches overlap before overlapping ones are filled as one
# What replaces a match: fixed text, or characters made for as many as it covers (gaps kept in place).
Fill = bytes | Callable[[int], bytes]


def _filler(n_bytes: int) -> bytes:
    return (_REDACTED * (n_bytes // len(_REDACTED) + 1))[:n_bytes]


def _hex_fill(n: int) -> bytes:
    return _filler((n + 1) // 2).hex().encode()[:n]


def _b64_fill(n: int) -> bytes:
    # Base64 of `[redacted][redacted]...` holds neither `+/` nor `-_`: one filling for both alphabets.
    return base64.b64encode(_filler(3 * ((n + 3) // 4)))[:n]


class _Needle:
    __slots__ = ("before", "fill", "groups", "nuls", "text")

    def __init__(self, text: bytes, fill: Fill, before: int = 0, groups: int = 0) -> None:
        self.text, self.fill, self.before, self.groups = text, fill, before, groups
        self.nuls = 2 if b"\0\0" in text else 1 if b"\0" in text else 0  # NULs the file must hold to match


def _base64_needles(secret: bytes) -> list[_Needle]:
    """For each offset of the secret in its 3-byte group and each alphabet: the characters only its bits make,
    the characters of its group before them, and how many characters its groups take."""
    found = []
    for offset, first in enumerate(_FIRST_WHOLE):
        stream = base64.b64encode(b"\0" * offset + secret)
        last = (8 * (offset + len(secret))) // 6  # one past the last character its bits alone make
        whole = stream[first:last]
        groups = 4 * ((offset + len(secret) + 2) // 3)
        url = whole.translate(bytes.maketrans(b"+/", b"-_"))
        found.append(_Needle(whole, _b64_fill, first, groups))
        if url != whole:
            found.append(_Needle(url, _b64_fill, first, groups))
    return found


class EncodedSecrets:
    """The encoded spellings of some secrets, and `redact(data)` that hides them in a file's bytes."""

    def __init__(self, values: Iterable[str]) -> None:
        plain: dict[bytes, _Needle] = {}  # searched in the bytes as they are
        broken: dict[bytes, _Needle] = {}  # in the bytes without gaps (base64)
        folded: dict[bytes, _Needle] = {}  # in the bytes without gaps, lowercased (hex, percent)
        as_written = set()
        for value in values:
            raw = value.encode("utf-8", "surrogatepass")
            as_written.add(raw)
            for codec in _TEXT_CODECS:
                spelled = value.encode(codec, "surrogatepass")
                plain.setdefault(spelled, _Needle(spelled, _REDACTED.decode().encode(codec)))
            plain.setdefault(raw[::-1], _Needle(raw[::-1], _REDACTED))
            folded.setdefault(raw.hex().encode(), _Needle(raw.hex().encode(), _hex_fill))
            # percent-encoded: as URLs write it (found in any case: `%2f` too, and so the letters around), and
            # every byte
            for spelled in {quote(raw, safe=""), quote(raw), quote_plus(raw), "".join(f"%{b:02x}" for b in raw)}:
                if spelled.encode() != raw:
                    folded.setdefault(spelled.lower().encode(), _Needle(spelled.lower().encode(), _REDACTED))
            for needle in _base64_needles(raw):
                broken.setdefault(needle.text, needle)
        for written in as_written:  # the plain spellings are `Redactor.in_bytes`'s own work
            plain.pop(written, None)
        self._plain = [n for n in plain.values() if n.text]
        self._broken = [n for n in broken.values() if n.text]
        self._folded = [n for n in folded.values() if n.text]

    def redact(self, data: bytes) -> bytes:
        """`data` with every encoded spelling replaced (the same object when it holds none).

        Matches that overlap (a key in UTF-16-LE after an ASCII character is also its UTF-16-BE spelling one
        byte early) are replaced one at a time, the likeliest first, and the file searched again. A file
        holding more than `MOST_MATCHES` is withheld whole (`WITHHELD`): filling each costs Python's time per
        byte, and a file written to hold a key a million times over (review 49: 3.7 s of CPU for 20 MB) is
        no file anyone needs whole."""
        try:
            return self._redact(data)
        except _TooMany:
            return WITHHELD

    def _redact(self, data: bytes) -> bytes:
        for _ in range(_PASSES):
            spans = self._spans(data)
            if sum(end - start for start, end, _ in spans) > MOST_BYTES:
                raise _TooMany  # filled a byte at a time: 9,600 long matches with gaps took 5 s (review 49b)
            if not spans:
                return data
            data, overlapped = _replaced(data, spans)
            if not overlapped:
                return data
        spans = self._spans(data)
        return _replaced(data, spans, joined=True)[0] if spans else data

    def _spans(self, data: bytes) -> list[tuple[int, int, Fill]]:
        spans: list[tuple[int, int, Fill]] = []
        # UTF-16/32 spellings of most keys hold NULs (UTF-32 two in a row): a file without any has none of them
        nuls = 0 if b"\0" not in data else 2 if b"\0\0" in data else 1  # one NUL is found at memchr's speed
        for n in self._plain:
            if n.nuls <= nuls:
                spans.extend((at, at + len(n.text), n.fill) for at in _all(data, n.text))
        joined = data.translate(None, _GAPS)
        joined = data if len(joined) == len(data) else joined
        hits: list[tuple[int, int, Fill]] = []
        for n in self._broken:
            for at in _all(joined, n.text):
                hits.append((*_groups(joined, at, n), n.fill))
        if self._folded:
            low = joined.lower()
            for n in self._folded:
                hits.extend((at, at + len(n.text), n.fill) for at in _all(low, n.text))
        if len(spans) + len(hits) > MOST_MATCHES:
            raise _TooMany
        if hits and joined is not data:
            spans.extend(_in_data(data, hits))
        else:
            spans.extend(hits)
        return spans


def _all(data: bytes, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        if len(found) > MOST_MATCHES:
            raise _TooMany
        at = data.find(needle, at + 1)
    return found


class _TooMany(Exception):
    """More matches in one file than `MOST_MATCHES`."""


def _groups(data: bytes, at: int, n: _Needle) -> tuple[int, int]:
    """The 4-character groups of the base64 stream holding the secret matched at `at`, as far as the stream
    reaches (it may start or end inside them: the stream's own first or last characters, unpadded)."""
    start, end = at, at + len(n.text)
    while start > at - n.before and start > 0 and data[start - 1] in _BASE64:
        start -= 1
    group_end = at - n.before + n.groups
    while end < group_end and end < len(data) and data[end] in _BASE64:
        end += 1
    return start, end


def _in_data(data: bytes, hits: list[tuple[int, int, Fill]]) -> list[tuple[int, int, Fill]]:
    """Spans of the bytes without gaps, as spans of `data` (gaps inside them included). Gaps are counted a
    chunk at a time and found only in the chunks that hold a span's ends."""
    kept = [0]  # bytes kept before each chunk
    for at in range(0, len(data), _CHUNK):
        kept.append(kept[-1] + len(data[at:at + _CHUNK].translate(None, _GAPS)))
    # The gaps of each chunk a span ends in are listed in Python: a file made mostly of gaps around its matches
    # (review 49b: 20 MB, 7 s) is withheld instead.
    touched = {bisect.bisect_right(kept, i) - 1 for start, end, _ in hits for i in (start, end - 1)}
    if sum(_CHUNK - (kept[c + 1] - kept[c]) for c in touched if c + 1 < len(kept)) > MOST_GAPS:
        raise _TooMany
    chunks: dict[int, list[int]] = {}

    def where(i: int) -> int:
        c = bisect.bisect_right(kept, i) - 1
        if c not in chunks:  # for each gap of the chunk, how many bytes of it are kept before it
            found = re.finditer(_GAP, data[c * _CHUNK:(c + 1) * _CHUNK])
            chunks[c] = [m.start() - n for n, m in enumerate(found)]
        k = i - kept[c]
        return c * _CHUNK + k + bisect.bisect_right(chunks[c], k)

    return [(where(start), where(end - 1) + 1, fill) for start, end, fill in hits]


def _replaced(data: bytes, spans: list[tuple[int, int, Fill]], joined: bool = False) -> tuple[bytes, bool]:
    """`data` with spans filled, and whether some overlapped. Of spans that overlap, only the likeliest is
    filled (one at an even offset, as text in UTF-16/32 is, then the longest), the others left for the next
    search; with `joined`, overlapping ones are filled as one, with the first one's filling."""
    spans.sort(key=lambda s: (s[0], -s[1]))
    out, done, overlapped = [], 0, False
    i = 0
    while i < len(spans):
        group = [spans[i]]
        end = spans[i][1]
        i += 1
        while i < len(spans) and spans[i][0] < end:
            group.append(spans[i])
            end = max(end, spans[i][1])
            i += 1
        if len(group) == 1 or joined:
            start, fill = group[0][0], group[0][2]
        else:
            overlapped = True
            start, end, fill = min(group, key=lambda s: (s[0] % 2, s[0] - s[1]))
        out.append(data[done:start])
        out.append(_filled(data[start:end], fill))
        done = end
    out.append(data[done:])
    return b"".join(out), overlapped


def _filled(span: bytes, fill: Fill) -> bytes:
    if isinstance(fill, bytes):
        return fill
    bare = span.translate(None, _GAPS)
    if len(bare) == len(span):
        return fill(len(span))
    made = iter(fill(len(bare)))
    return bytes(c if c in _GAPS else next(made) for c in span)
