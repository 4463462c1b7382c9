"""The calculator: right answers, refusals, and a fuzz proving it only ever raises ToolError."""

from __future__ import annotations

import ast
import builtins
import math
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shou.errors import ToolError
from shou.tools.base import ToolContext
from shou.tools.builtin import calc
from shou.tools.builtin.calc import FUNCTIONS, calculator


async def calc_call(expression: str) -> Any:
    return await calculator.call(calculator.validate({"expression": expression}), ToolContext(Path(".")))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("123 * 45", "5535"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),
        ("-2 ** 2", "-4"),
        ("10 / 4", "2.5"),
        ("10 / 2", "5.0"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("2 ** -2", "0.25"),
        ("1_000 + 1", "1001"),
        ("0.1 + 0.2", repr(0.1 + 0.2)),
        ("sqrt(16)", "4.0"),
        ("log(8, 2)", "3.0"),
        ("log(e)", "1.0"),
        ("log10(1000)", "3.0"),
        ("exp(0)", "1.0"),
        ("factorial(20)", "2432902008176640000"),
        ("gcd(12, 18, 8)", "2"),
        ("hypot(3, 4)", "5.0"),
        ("max(1, 5, 3)", "5"),
        ("min(4, -2.5)", "-2.5"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("floor(-2.5) + ceil(2.1)", "0"),
        ("abs(-3) + fabs(-1)", "4.0"),
        ("degrees(pi)", "180.0"),
        ("atan2(1, 1) * 4", repr(math.atan2(1, 1) * 4)),
        ("sin(0) + cos(0)", "1.0"),
        ("tau / 2", repr(math.tau / 2)),
        ("  1 + 1  ", "2"),
    ],
)
async def test_correct_results(expression: str, expected: str) -> None:
    assert await calc_call(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("os", "unknown name 'os'"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("eval('1')", "unknown function 'eval'"),
        ("(1).__class__", "attribute access"),
        ("math.sqrt(4)", "attribute access"),
        ("(1).__class__.__bases__[0].__subclasses__()", "attribute access"),
        ("[1, 2][0]", "indexing"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("(lambda: 1)()", "only the listed functions"),
        ("lambda: 1", "Lambda is not allowed"),
        ("'abc'", "not a number"),
        ("b'1'", "not a number"),
        ("True + 1", "not a number"),
        ("1j", "not a number"),
        ("round(2.5, ndigits=1)", "positional"),
        ("max(*(1, 2))", "positional"),
        ("sqrt", "is a function"),
        ("sqrt(1, 2)", "takes 1 argument"),
        ("min()", "takes 1 or more"),
        ("1 << 2", "LShift is not allowed"),
        ("1 < 2", "Compare is not allowed"),
        ("x := 1", "cannot parse"),
        ("1 +", "cannot parse"),
        ("", "empty"),
        ("9**9**9", "more than"),
        ("2**10**10", "more than"),
        ("10**4000", "more than"),
        ("10**3999 * 10", "more than"),
        ("factorial(1001)", "0 to 1000"),
        ("factorial(-1)", "0 to 1000"),
        ("factorial(2.5)", "whole number"),
        ("round(5, -10**9)", "second argument"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("log(0)", "math domain error"),
        ("10.0 ** 400", "too large"),
        ("exp(1000)", "too large"),
        ("1e308 * 10", "not a finite number"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("1 + " * 500 + "1", "limit is 1000"),
        ("-" * 200 + "1", "nested more than"),
        ("(" * 300 + "1" + ")" * 300, "cannot parse"),
    ],
)
async def test_refusals_are_tool_errors(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        await calc_call(expression)


@pytest.mark.parametrize(
    "expression", ["9**9**9", "2**10**10", "(10**3000) ** (10**3000)", "factorial(10**9)"]
)
async def test_huge_results_are_refused_quickly(expression: str) -> None:
    start = time.monotonic()
    with pytest.raises(ToolError):
        await calc_call(expression)
    # Computing any of these would take hours (or exhaust memory), so 10 s is 1000x a normal run and still
    # tells a refusal up front from a result computed, then found too big.
    assert time.monotonic() - start < 10


def test_the_allowlist_is_what_the_brief_says() -> None:
    assert set(FUNCTIONS) == {
        "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "log", "log10", "log2", "exp", "floor",
        "ceil", "fabs", "abs", "round", "factorial", "gcd", "hypot", "degrees", "radians", "min", "max",
    }
    assert set(calc.CONSTANTS) == {"pi", "e", "tau"}


# ---------------------------------------------------------------- nothing is ever looked up or run


class Spies:
    """Records every attempt to run code or touch a name the calculator must never touch."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.real_compile = builtins.compile
        self.ast_parses = 0

    def named(self, name: str) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"{name} was called")

        return spy

    def compile(self, source: Any, filename: Any, mode: Any, flags: int = 0, *args: Any, **kw: Any) -> Any:
        # ast.parse goes through compile() too, but only to build a tree; anything else makes code
        if not flags & ast.PyCF_ONLY_AST:
            self.calls.append("compile")
            raise AssertionError("compile was asked for a code object")
        self.ast_parses += 1
        return self.real_compile(source, filename, mode, flags, *args, **kw)


@contextmanager
def spied() -> Iterator[Spies]:
    spies = Spies()
    with ExitStack() as stack:
        # __import__ is not spied on: shou's own lazy imports (pydantic, threading) go through it
        for name in ("eval", "exec"):
            stack.enter_context(mock.patch.object(builtins, name, spies.named(name)))
        stack.enter_context(mock.patch.object(builtins, "compile", spies.compile))
        for name in ("sentinel_fn", "os", "x"):
            stack.enter_context(mock.patch.object(builtins, name, spies.named(name), create=True))
            stack.enter_context(mock.patch.object(calc, name, spies.named(name), create=True))
        yield spies


async def test_names_are_never_looked_up_or_called() -> None:
    names = ["sentinel_fn()", "os", "x(1)", "sentinel_fn", "sqrt(sentinel_fn())", "__import__('os')"]
    for expression in names:
        with spied() as spies, pytest.raises(ToolError):
            await calc_call(expression)
        assert spies.calls == []
        assert spies.ast_parses == 1  # the spy really was in place


async def assert_only_tool_errors(expression: str) -> None:
    with spied() as spies:
        try:
            result = await calc_call(expression)
        except ToolError as e:
            assert str(e)
        else:
            assert isinstance(result, str) and result
    assert spies.calls == []


TOKENS = [
    "0", "1", "2", "7", "9", "10", "1.5", "1e3", "1e308", "0x1F", "1_0",
    "+", "-", "*", "/", "//", "%", "**", "<<", "(", ")", ",", ".", " ", "=", ":", ":=", "j",
    "sqrt", "log", "factorial", "round", "min", "gcd", "pi", "e",
    "__import__", "open", "eval", "exec", "os", "sentinel_fn", "x", "__class__", "globals", "lambda",
    "'", '"', "[", "]", "{", "}", "\n", "not", "if", "else", "for", "in", "*a", "**k",
]
NAMES = [*FUNCTIONS, "pi", "e", "tau", "__import__", "open", "eval", "os", "sentinel_fn", "x"]
OPS = ["+", "-", "*", "/", "//", "%", "**"]

token_soup = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
atoms = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(NAMES),
)
well_formed = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(OPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "+"]), inner).map("".join),
        st.tuples(st.sampled_from(NAMES), st.lists(inner, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=1200))
async def test_fuzz_arbitrary_text(expression: str) -> None:
    await assert_only_tool_errors(expression)


@settings(max_examples=300, deadline=None)
@given(token_soup)
async def test_fuzz_token_soup(expression: str) -> None:
    await assert_only_tool_errors(expression)


@settings(max_examples=500, deadline=None)
@given(well_formed)
async def test_fuzz_well_formed_expressions(expression: str) -> None:
    await assert_only_tool_errors(expression)
