"""`frozen.fast_init`: the `__init__` it makes does what dataclass's own does, for the classes it is given."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any, ClassVar

import pytest

from shou import events
from shou.frozen import fast_init, fits
from shou.messages import Message, ToolCall
from shou.usage import Usage


def _params(cls: type) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]


def _dataclass_params(cls: type) -> list[tuple[str, Any, Any]]:
    """The parameters dataclass's __init__ has: the fields in order, keyword-only ones last."""
    fields = dataclasses.fields(cls)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    out = [(f.name, kind, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
           for f in fields if not f.kw_only]
    return out + [(f.name, inspect.Parameter.KEYWORD_ONLY,
                   inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
                  for f in fields if f.kw_only]


def _family(fast: bool) -> tuple[type, type]:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        kind: ClassVar[str] = "base"
        run_id: str
        parent: str = dataclasses.field(default="", kw_only=True)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Child(Base):
        step: int
        names: tuple[str, ...] = ()
        extra: dict[str, Any] | None = None

    return (fast_init(Base), fast_init(Child)) if fast else (Base, Child)


def test_the_same_as_dataclass_on_a_family_with_keyword_only_fields() -> None:
    fast_base, fast_child = _family(True)
    base, child = _family(False)
    assert _params(fast_child) == _params(child) and _params(fast_base) == _params(base)
    for args, kwargs in [(("r", 1), {}), (("r", 1, ("a",)), {"parent": "p"}), (("r",), {"step": 2, "extra": {}})]:
        a, b = fast_child(*args, **kwargs), child(*args, **kwargs)
        assert repr(a).replace("Child", "") == repr(b).replace("Child", "")
        assert a == fast_child(*args, **kwargs)
        if a.extra is None:
            assert hash(a) == hash(fast_child(*args, **kwargs))
    for bad_args, bad_kwargs in [((), {}), (("r", 1, (), None, 5), {}), (("r", 1), {"nope": 1}),
                                 (("r", 1), {"step": 1})]:
        with pytest.raises(TypeError):
            child(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            fast_child(*bad_args, **bad_kwargs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast_child("r", 1).step = 2


def test_classes_it_cannot_take_are_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        items: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int = 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class Post:
        a: int = 0

        def __post_init__(self) -> None:
            pass

    for cls in (Factory, NoSlots, Post):
        assert not fits(cls)
        with pytest.raises(TypeError):
            fast_init(cls)


@pytest.mark.parametrize("cls", [Usage, Message, ToolCall, *events.EVENT_TYPES.values()])
def test_shous_classes_keep_dataclass_parameters(cls: type) -> None:
    if not fits(cls):  # dataclass's own __init__ (a field with a factory)
        assert "_set0" not in cls.__init__.__code__.co_names
        return
    assert _params(cls) == _dataclass_params(cls)
    fields = dataclasses.fields(cls)
    values = {f.name: f"v-{f.name}" for f in fields}
    made = cls(**values)
    assert {f.name: getattr(made, f.name) for f in fields} == values
    assert made == cls(**values)
    assert pickle.loads(pickle.dumps(made)) == made


def test_the_classes_given_to_it_use_it() -> None:
    for cls in (Usage, Message, ToolCall, events.ModelRequest, events.ModelResponse, events.ToolCallFinished):
        assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
        assert "_set0" in cls.__init__.__code__.co_names
