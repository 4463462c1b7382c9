"""Token accounting shared by the model client, the loop and the events."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call (or a sum of them) consumed; `requests` counts model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
        )

    @classmethod
    def from_wire(cls, data: dict | None) -> Usage:
        """Read the `usage` object of a Chat Completions response (one request)."""
        if not data:
            return cls(requests=1)
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0), 1)
