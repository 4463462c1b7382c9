"""Redaction of a text that arrives in pieces (a streamed reply): `StreamRedactor`."""

from __future__ import annotations

from .redact import REDACTED, Redactor

__all__ = ["StreamRedactor"]


class StreamRedactor:
    """Redacts a text that arrives in pieces (a streamed reply): a secret split across pieces is still found.

    What could be the start of a secret is held back until the next piece shows whether it is one (at most
    the longest secret's length less one character), and given out by `end()`."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._held = ""

    def feed(self, piece: str) -> str:
        """What of the text so far can be shown now, secrets replaced.

        Shown: the text up to the first place that could start a secret not yet complete, and a whole secret
        that starts before it (it can no longer turn out to be the start of a longer one). What is shown is
        what `Redactor.text` of the whole text shows there, wherever the pieces were cut."""
        pattern = self._redactor.pattern
        if pattern is None:
            return piece
        text = self._held + piece
        cut = len(text) - self._redactor.held_back(text)
        out, done = [], 0
        for m in pattern.finditer(text):
            if m.start() >= cut:
                break
            out += [text[done:m.start()], REDACTED]
            done = m.end()
        cut = max(cut, done)
        out.append(text[done:cut])
        self._held = text[cut:]
        return "".join(out)

    def end(self) -> str:
        """The rest of the text (the stream ended)."""
        rest, self._held = self._held, ""
        return self._redactor.text(rest)
