"""`Usage.__init__`, made by `frozen.fast_init`, does what dataclass's own would."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import pickle

import pytest

from shou.usage import NO_USAGE, Usage


@dataclasses.dataclass(frozen=True, slots=True)
class _Reference:  # Usage's fields, with dataclass's generated __init__
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    estimated: bool = False
    cached_tokens: int = 0
    cost: float | None = 0.0


def _values(u: object) -> tuple[object, ...]:
    return tuple(getattr(u, f.name) for f in dataclasses.fields(_Reference))


def test_the_same_fields_signature_and_values() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(Usage)] == [
        (f.name, f.default) for f in dataclasses.fields(_Reference)]
    def params(cls: type) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]

    assert params(Usage) == params(_Reference)
    for args in itertools.product((0, 7), (0, 3), (1,), (False, True), (0, 2), (0.0, None, 0.25)):
        for n in range(len(args) + 1):
            assert _values(Usage(*args[:n])) == _values(_Reference(*args[:n]))
        kwargs = dict(zip(("input_tokens", "output_tokens", "requests", "estimated", "cached_tokens", "cost"), args,
                          strict=True))
        u = Usage(**kwargs)
        assert _values(u) == _values(_Reference(**kwargs))
        assert u == Usage(*args) and hash(u) == hash(Usage(*args))
        assert pickle.loads(pickle.dumps(u)) == u
        assert dataclasses.replace(u, cost=1.5).cost == 1.5
    assert repr(NO_USAGE) == repr(_Reference()).replace("_Reference", "Usage")


def test_still_frozen_and_checked() -> None:
    u = Usage(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        u.cost = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        Usage(1, 2, 3, False, 0, 0.0, 9)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Usage(tokens=3)  # type: ignore[call-arg]
    assert (u + Usage(2, cost=None)) == Usage(3, 0, 0, False, 0, None)
