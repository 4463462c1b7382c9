"""A cheaper `__init__` for the frozen dataclasses made several times a step (usages, messages, model events).

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self, name, value)` (the
class's own `__setattr__` refuses): the method is looked up on the type, and the call makes two tuples, at
~1,300 instructions a field more than a plain class's. `fast_init` replaces it with one that calls each slot's
own setter (its member descriptor's `__set__`: ~600 more than a plain class's), with the same parameters,
defaults and keyword-only fields. Only for `slots=True` dataclasses whose fields all have plain defaults or none (no
`default_factory`, no `InitVar`, no `__post_init__`): anything else is refused when the class is defined.
A subclass made with `@dataclass` gets dataclass's own `__init__` again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init", "fits"]

T = TypeVar("T")


def fits(cls: type) -> bool:
    """Whether `fast_init` can make `cls`'s `__init__`: a slots dataclass, no `__post_init__`, every field set by
    `__init__` from a plain default or none."""
    return (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__ and not hasattr(cls, "__post_init__")
            and all(f.init and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls)))


def fast_init(cls: type[T]) -> type[T]:
    """`cls` with its dataclass `__init__` replaced by one setting the slots directly (see the module)."""
    if not fits(cls):
        raise TypeError(f"fast_init cannot make {cls.__name__}'s __init__ (see shou.frozen)")
    fields = dataclasses.fields(cls)
    names: dict[str, Any] = {"MISSING": dataclasses.MISSING}
    plain, keyword, body = [], [], []
    for i, f in enumerate(fields):
        descriptor = next(k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__)
        names[f"_set{i}"] = descriptor.__set__
        param = f.name
        if f.default is not dataclasses.MISSING:
            names[f"_d{i}"] = f.default
            param += f"=_d{i}"
        (keyword if f.kw_only else plain).append(param)
        body.append(f"    _set{i}(self, {f.name})")
    params = ", ".join(["self", *plain, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}) -> None:\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # made from the class's own field names, as dataclasses does
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init  # type: ignore[misc]
    return cls
