"""Server-sent events, parsed as the WHATWG spec says, from bytes as they arrive.

https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation:
lines end in CRLF, LF or CR (a CRLF may be split across two reads); a line starting with `:` is a
comment; `field: value` loses one space after the colon; `data` lines accumulate, joined with LF; `event`
names the event (default `message`); a blank line dispatches the event if it has data; other fields
(`id`, `retry`, unknown ones) are ignored, since a model reply is never resumed by event id. One leading
UTF-8 byte-order mark is dropped, and bytes that are not UTF-8 become U+FFFD. When the stream ends, a
half-received event is discarded, never dispatched: a cut reply cannot pass for a whole one.

Works on bytes: LF, CR and `:` never occur inside a multi-byte UTF-8 sequence, so a chunk boundary can
fall anywhere, and only what is dispatched is decoded.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]

_BOM = b"\xef\xbb\xbf"


class SSEDecoder:
    """Incremental event-stream decoder: `feed(bytes)` returns the `(event, data)` pairs it completes."""

    __slots__ = ("_cr", "_data", "_event", "_started", "_tail")

    def __init__(self) -> None:
        self._tail = b""  # an unfinished line
        self._data: list[bytes] = []
        self._event = b""
        self._cr = False  # the last chunk ended in CR: a LF opening the next one belongs to it
        self._started = False  # past the place where a byte-order mark may stand

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Parse the next bytes of the stream; return the events they complete, in order."""
        if not chunk:
            return []
        if not self._started:
            chunk = self._start(chunk)
            if not chunk:
                return []
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        events: list[tuple[str, str]] = []
        data = self._data
        for line in lines:
            if line.startswith(b"data:"):  # the common case first
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if data:
                    name = self._event.decode("utf-8", "replace") if self._event else "message"
                    events.append((name, b"\n".join(data).decode("utf-8", "replace")))
                    data.clear()
                self._event = b""
            elif line[0] != 0x3A:  # not a comment
                field, _, value = line.partition(b":")
                if field == b"event":
                    self._event = value[1:] if value[:1] == b" " else value
                elif field == b"data":  # `data` alone: an empty data line
                    data.append(b"")
        return events

    def _start(self, chunk: bytes) -> bytes:
        """The stream's first bytes without a byte-order mark; empty while they may still be the start of one
        (kept until the next chunk tells)."""
        chunk = self._tail + chunk
        self._tail = b""
        if len(chunk) < 3 and _BOM.startswith(chunk):
            self._tail = chunk
            return b""
        self._started = True
        return chunk[3:] if chunk.startswith(_BOM) else chunk
