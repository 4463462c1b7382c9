"""Events from their JSON form, checked: a log may be damaged or planted, so a field of the wrong kind makes
the row undecodable (`ValueError`), never a value that crashes whoever reads it later."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from .events import EVENT_TYPES, Event, PlanStep
from .messages import ImagePart, Message, ToolCall, part_from_wire
from .usage import Usage

__all__ = ["event_from_dict"]


def _decoder(hint: Any) -> typing.Callable[[Any], Any] | None:
    """How to turn a JSON value back into a field of type `hint` (None: use as is)."""
    args = typing.get_args(hint)
    if args and type(None) in args:  # Optional[X]: decode X, keep None
        inner = next(a for a in args if a is not type(None))
        dec = _decoder(inner)
        return None if dec is None else (lambda v: None if v is None else dec(v))
    if hint is Message:
        return Message.from_wire
    if hint is ToolCall:
        return ToolCall.from_wire
    if hint is ImagePart:
        return part_from_wire
    if hint is Usage:  # checked: a negative count in a planted log must not lower what budgets see
        return Usage.from_log
    if typing.get_origin(hint) is tuple:
        if typing.get_args(hint)[:1] == (PlanStep,):
            return lambda v: tuple(PlanStep.from_wire(x) for x in v)
        return _strings
    # A log may be damaged or planted (a cloned repository's .shou/shou.db): a field of the wrong kind makes
    # the row undecodable (left out, as damage is), never a value that crashes whoever reads it later.
    if typing.get_origin(hint) is dict:
        return _kind(dict)
    if typing.get_origin(hint) is Literal:
        return _kind(str)
    return _SCALARS.get(hint)


def _kind(*kinds: type) -> typing.Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if type(value) in kinds:
            return value
        raise ValueError(f"expected {' or '.join(k.__name__ for k in kinds)}, not {type(value).__name__}")

    return check


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return tuple(value)


_SCALARS: dict[Any, typing.Callable[[Any], Any]] = {int: _kind(int), str: _kind(str), bool: _kind(bool),
                                                    float: _kind(float, int)}
_DECODERS: dict[type[Event], dict[str, typing.Callable[[Any], Any] | None]] = {}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from `Event.to_dict()` output; raises `ValueError` for an unknown type or a field
    of the wrong kind."""
    cls = EVENT_TYPES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    decoders = _DECODERS.get(cls)
    if decoders is None:
        hints = typing.get_type_hints(cls)
        decoders = _DECODERS[cls] = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, dec in decoders.items():
        if name in data:
            kwargs[name] = data[name] if dec is None else dec(data[name])
    return cls(**kwargs)
