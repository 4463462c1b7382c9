"""What an A2A request says, read and checked before shou.serve.a2a_handler acts on it: the checks every
method makes first (no NUL character, no number JSON cannot hold), a message's metadata against the REST API's
own bounds, the task a message's parts ask, the decision a reply to a waiting task gives, and the session a
caller's context runs in.

It stands alone because it is the reading of the protocol's messages, apart from what the handler then does
with the server's runner, queue and log: these are pure functions of a request (no server), so they import
nothing of the handler and can be tested without one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from a2a.types import Message
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict, SerializeToJsonError
from pydantic import BeforeValidator, ConfigDict, Field, create_model

from .schema import RunOptions

__all__ = ["check_request", "decision_of", "message_text", "session_for"]

_YES = frozenset({"approve", "approved", "allow", "allowed", "yes", "y", "ok"})
_NO = frozenset({"deny", "denied", "reject", "rejected", "no", "n"})


def _number(value: Any) -> Any:
    """A limit must be a JSON number. protobuf's Struct holds every number as a double (5 comes as 5.0), and
    pydantic's lax mode would also take `true` as 1 and "5" as 5. A whole double is given on as an int, so that
    1e300 meets the field's upper bound (and its message) rather than pydantic's "exceeded maximum size"."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _limit(name: str) -> Any:
    """RunOptions' field `name` (its type and bounds: the REST API's), taking numbers only."""
    field = RunOptions.model_fields[name]
    return Annotated[field.annotation, BeforeValidator(_number)], field


# What a message's metadata may ask. Other keys are the caller's own and left alone (extra="ignore").
_Metadata = create_model("_Metadata", __config__=ConfigDict(extra="ignore"),
                         agent=(Annotated[str | None, Field(max_length=200)], None),
                         **{name: _limit(name) for name in ("max_steps", "token_budget", "max_cost")})


def check_request(params: Any) -> None:
    """Invalid params for what the REST API does not take either (shou.serve.schema), before anything else looks
    at the request: a number that is not finite, or a NUL character in any string of it (an id, a part's text, a
    metadata key or value, at any depth): no person means one, and PostgreSQL's text can neither keep it nor be
    asked about it (its error, not the caller's, was the answer)."""
    try:
        tree = MessageToDict(params)
    except SerializeToJsonError:
        # Python's json.loads, which the SDK parses with, takes NaN, Infinity and 1e400 (as inf); protobuf's Struct
        # keeps them but cannot give them back, so every later look at the metadata or a data part would fail
        raise InvalidParamsError(message="a number of the request is not finite (NaN, Infinity, or past 1.8e308): "
                                         "JSON has no such number") from None
    todo: list[tuple[str, Any]] = [("", tree)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise InvalidParamsError(message=f"{where[:200] or 'a string'} must not contain the NUL character "
                                                 "(\\u0000)")
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    raise InvalidParamsError(message=f"a key of {where[:200] or 'the request'} must not contain the "
                                                     "NUL character (\\u0000)")
                todo.append((f"{where}.{key}" if where else key, item))
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", item) for i, item in enumerate(value))


def session_for(user: str, context_id: str) -> str:
    """The session of `user`'s context `context_id`: a name that says neither, and that another user's same
    `contextId` never meets."""
    digest = hashlib.sha256(f"{user}\x00{context_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"a2a-{digest[:24]}"


def message_text(message: Message) -> str:
    """The task a message asks: its text parts, and its data parts as JSON, one after another."""
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        else:
            raise ContentTypeNotSupportedError(
                "file parts are not taken: put the file in the workspace (PUT /v1/files/content?path=...) and "
                "name its path in the text")
    return "\n".join(texts)


def decision_of(message: Message) -> tuple[bool, str, str]:
    """`(allow, reason, call_id)` a message to a task waiting for approval gives (call_id "" for all)."""
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            data = MessageToDict(part.data)
            if isinstance(data, dict) and isinstance(data.get("approve", data.get("allow")), bool):
                return (bool(data.get("approve", data.get("allow"))), str(data.get("reason") or ""),
                        str(data.get("call_id") or ""))
    text = " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()
    word, _, rest = text.partition(" ")
    word = word.strip(".,!:;").lower()
    if word in _YES or word in _NO:
        return word in _YES, rest.strip(), ""
    raise InvalidParamsError(message="this task waits for approval of a call: reply \"approve\" or \"deny\" (a "
                                     "reason may follow), or send a data part {\"approve\": true|false}")
