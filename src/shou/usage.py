"""Token accounting shared by the model client, the loop and the events."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call (or a sum of them) consumed; `requests` counts model calls. `estimated` is true
    when some of the counts were not reported by the provider but counted by shou's tokenizer."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            self.estimated or other.estimated,
        )

    @classmethod
    def from_wire(cls, data: dict | None) -> Usage:
        """Read the `usage` object of a Chat Completions response (one request)."""
        if not data:
            return cls(requests=1)  # no counts: the loop estimates them
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0), 1)
