"""Chat messages and their exact Chat Completions wire form.

A `Message` is immutable. `Message.to_wire()` gives the dict the `/chat/completions` API takes, and
`Message.from_wire()` reads one back; the two are inverse for every message this module can express,
so a conversation survives a trip through the session store or an HTTP boundary unchanged.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Literal

from .frozen import fast_init

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))


@dataclass(frozen=True, slots=True)
class TextPart:
    """A piece of text inside a multi-part message."""

    text: str

    def to_wire(self) -> dict[str, Any]:
        """The `{"type": "text"}` content part."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image inside a message, held as base64 so messages stay JSON-friendly.

    `detail` is the optional OpenAI hint (`low`, `high`, `auto`); `None` leaves it out of the wire form.
    """

    data: str
    media_type: str = "image/png"
    detail: str | None = None

    @classmethod
    def from_bytes(cls, raw: bytes, media_type: str = "image/png") -> ImagePart:
        """Wrap raw PNG/JPEG bytes."""
        return cls(base64.b64encode(raw).decode("ascii"), media_type)

    @property
    def url(self) -> str:
        """The `data:` URL the wire format carries."""
        return f"data:{self.media_type};base64,{self.data}"

    def to_wire(self) -> dict[str, Any]:
        """The `{"type": "image_url"}` content part."""
        image_url: dict[str, Any] = {"url": self.url}
        if self.detail is not None:
            image_url["detail"] = self.detail
        return {"type": "image_url", "image_url": image_url}


Part = TextPart | ImagePart
Content = str | tuple[Part, ...] | None


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the model. `arguments` is the raw JSON text, as sent."""

    id: str
    name: str
    arguments: str = "{}"

    def to_wire(self) -> dict[str, Any]:
        """The `tool_calls[]` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ToolCall:
        """Read a `tool_calls[]` entry."""
        fn = data.get("function") or {}
        return cls(id=str(data.get("id") or ""), name=str(fn.get("name") or ""), arguments=fn.get("arguments") or "")


@fast_init  # a dozen a task: each reply, each result, the system message of each request
@dataclass(frozen=True, slots=True)
class Message:
    """One chat message: system, user, assistant (maybe with tool calls) or tool result."""

    role: Role
    content: Content = None
    tool_calls: tuple[ToolCall, ...] = field(default=())
    tool_call_id: str | None = None
    name: str | None = None

    # Constructors named for the roles keep call sites short and hard to get wrong.
    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls("system", text)

    @classmethod
    def user(cls, content: str | tuple[Part, ...] | list[Part]) -> Message:
        """A user message with text or parts (text and images)."""
        return cls("user", content if isinstance(content, str) else tuple(content))

    @classmethod
    def assistant(cls, text: str | None = None, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> Message:
        """An assistant message; `text` is `None` when the model only called tools."""
        return cls("assistant", text, tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, name: str, content: str | tuple[Part, ...]) -> Message:
        """The result of the tool call `tool_call_id`."""
        return cls("tool", content, tool_call_id=tool_call_id, name=name)

    @property
    def text(self) -> str:
        """The text of the content, parts joined; images are left out."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts of the content."""
        if isinstance(self.content, tuple):
            return tuple(p for p in self.content if isinstance(p, ImagePart))
        return ()

    def to_wire(self) -> dict[str, Any]:
        """The Chat Completions dict for this message."""
        out: dict[str, Any] = {"role": self.role}
        if isinstance(self.content, tuple):
            out["content"] = [p.to_wire() for p in self.content]
        else:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [c.to_wire() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Message:
        """Read a Chat Completions message dict; raises `ValueError` on an unknown role or part."""
        role = data.get("role")
        if role not in ROLES:
            raise ValueError(f"unknown message role {role!r}; expected one of {sorted(ROLES)}")
        raw = data.get("content")
        content: Content
        if raw is None or isinstance(raw, str):
            content = raw
        elif isinstance(raw, list):
            content = tuple(part_from_wire(p) for p in raw)
        else:
            raise ValueError(f"message content must be a string, a list of parts or null, not {type(raw).__name__}")
        calls = tuple(ToolCall.from_wire(c) for c in data.get("tool_calls") or ())
        return cls(role, content, calls, data.get("tool_call_id"), data.get("name"))


def part_from_wire(part: dict[str, Any]) -> Part:
    """Read one content part (`text` or base64 `image_url`); raises `ValueError` for anything else."""
    kind = part.get("type")
    if kind == "text":
        return TextPart(str(part.get("text", "")))
    if kind == "image_url":
        image_url = part.get("image_url") or {}
        url = str(image_url.get("url", ""))
        if not url.startswith("data:") or ";base64," not in url:
            raise ValueError("only base64 data: URLs are supported for image parts")
        media_type, data = url[5:].split(";base64,", 1)
        return ImagePart(data, media_type, image_url.get("detail"))
    raise ValueError(f"unknown content part type {kind!r}")


def messages_to_wire(messages: list[Message] | tuple[Message, ...]) -> list[dict[str, Any]]:
    """Convert a conversation to its wire list."""
    return [m.to_wire() for m in messages]
