"""`calculator`: arithmetic on a parsed syntax tree, never `eval`.

The expression is parsed with `ast.parse` (which builds a tree and runs nothing) and walked by
`evaluate`, which knows numbers, a few operators, an allowlist of math functions and three
constants. Anything else is refused by name, so no Python object is ever looked up or called.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable
from typing import Any

from ...errors import ToolError
from ..base import tool

__all__ = ["calculator", "evaluate"]

Number = int | float

MAX_LENGTH = 1000
MAX_DEPTH = 60
# str() refuses ints over 4300 digits (sys.int_info.default_max_str_digits), so results stay below.
MAX_DIGITS = 4000
MAX_BITS = int(MAX_DIGITS * math.log2(10))
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 1000

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**"}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _factorial(n: Number) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise ToolError(f"factorial needs a whole number, got {n!r}")
        n = int(n)
    if not 0 <= n <= MAX_FACTORIAL:
        raise ToolError(f"factorial takes a whole number from 0 to {MAX_FACTORIAL}, got {n}")
    return math.factorial(n)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        # a huge negative ndigits makes round() build 10**-ndigits, which could take forever
        raise ToolError(f"round's second argument must be a whole number from -{MAX_ROUND_DIGITS} to "
                        f"{MAX_ROUND_DIGITS}")
    return round(x, ndigits)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


# name -> (function, least arguments, most arguments or None for any number)
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "sqrt": (math.sqrt, 1, 1), "sin": (math.sin, 1, 1), "cos": (math.cos, 1, 1), "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1), "acos": (math.acos, 1, 1), "atan": (math.atan, 1, 1),
    "atan2": (math.atan2, 2, 2), "log": (_log, 1, 2), "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1), "exp": (math.exp, 1, 1), "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1), "fabs": (math.fabs, 1, 1), "abs": (abs, 1, 1), "round": (_round, 1, 2),
    "factorial": (_factorial, 1, 1), "gcd": (math.gcd, 1, None), "hypot": (math.hypot, 1, None),
    "degrees": (math.degrees, 1, 1), "radians": (math.radians, 1, 1),
    "min": (lambda *a: min(a), 1, None), "max": (lambda *a: max(a), 1, None),
}

_ALLOWED = (f"use numbers, + - * / // % **, parentheses, the constants {', '.join(CONSTANTS)} and the "
            f"functions {', '.join(FUNCTIONS)}")


def _check_size(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        # e.g. a negative number to a fractional power gives a complex number
        raise ToolError(f"the result {value!r} is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ToolError(f"the result would have more than {MAX_DIGITS} digits")
    return value


def _power(base: Number, exp: Number) -> Number:
    # Estimate first: 9**9**9 would take minutes and gigabytes to compute just to be refused.
    if (isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1
            and (exp > MAX_BITS or exp * math.log2(abs(base)) > MAX_BITS)):
        raise ToolError(f"the result of {base} ** {exp} would have more than {MAX_DIGITS} digits")
    return _check_size(base**exp)


def _node(node: ast.AST, depth: int) -> Number:
    if depth > MAX_DEPTH:
        raise ToolError(f"the expression is nested more than {MAX_DEPTH} levels deep; simplify it")
    if isinstance(node, ast.Expression):
        return _node(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolError(f"{node.value!r} is not a number; {_ALLOWED}")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _node(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _node(node.left, depth + 1), _node(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id in FUNCTIONS:
            raise ToolError(f"{node.id} is a function; call it, e.g. {node.id}(2)")
        raise ToolError(f"unknown name {node.id!r}; {_ALLOWED}")
    if isinstance(node, ast.Call):
        return _call(node, depth)
    if isinstance(node, ast.BinOp):
        raise ToolError(f"the operator {type(node.op).__name__} is not allowed; {_ALLOWED}")
    if isinstance(node, ast.Attribute):
        raise ToolError(f"attribute access (.{node.attr}) is not allowed; {_ALLOWED}")
    if isinstance(node, ast.Subscript):
        raise ToolError(f"indexing with [] is not allowed; {_ALLOWED}")
    raise ToolError(f"{type(node).__name__} is not allowed in a calculation; {_ALLOWED}")


def _call(node: ast.Call, depth: int) -> Number:
    if isinstance(node.func, ast.Attribute):
        raise ToolError(f"attribute access (.{node.func.attr}) is not allowed; call functions by their bare "
                        f"name, e.g. sqrt(2); {_ALLOWED}")
    if not isinstance(node.func, ast.Name):
        raise ToolError(f"only the listed functions can be called; {_ALLOWED}")
    name = node.func.id
    if name not in FUNCTIONS:
        raise ToolError(f"unknown function {name!r}; {_ALLOWED}")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise ToolError(f"{name}() takes plain positional arguments only, e.g. {name}(2)")
    fn, least, most = FUNCTIONS[name]
    if len(node.args) < least or (most is not None and len(node.args) > most):
        wanted = f"{least}" if least == most else f"{least} or more" if most is None else f"{least} to {most}"
        raise ToolError(f"{name}() takes {wanted} argument(s), got {len(node.args)}")
    args = [_node(a, depth + 1) for a in node.args]
    try:
        return _check_size(fn(*args))
    except (TypeError, ValueError) as e:
        raise ToolError(f"{name}({', '.join(map(_render, args))}) failed: {e}") from None


def _render(value: Number) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; `ToolError` (and only that) for anything else."""
    if len(expression) > MAX_LENGTH:
        raise ToolError(f"the expression is {len(expression)} characters long; the limit is {MAX_LENGTH}")
    if not expression.strip():
        raise ToolError(f"the expression is empty; {_ALLOWED}")
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" and friends would leak to the user's stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        msg = getattr(e, "msg", None) or str(e) or type(e).__name__
        raise ToolError(f"cannot parse the expression: {msg}") from None
    try:
        return _node(tree, 0)
    except ToolError:
        raise
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large for a floating-point number") from None
    except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as e:
        raise ToolError(f"cannot calculate that: {e}") from None


@tool(idempotent=True)
def calculator(expression: str) -> str:
    """Calculate an arithmetic expression, e.g. '123 * 45' or 'sqrt(2) * log(100, 10)'.

    Supports + - * / // % ** and parentheses; sqrt, sin, cos, tan, asin, acos, atan, atan2, log
    (log(x) or log(x, base)), log10, log2, exp, floor, ceil, fabs, abs, round, factorial, gcd, hypot,
    degrees, radians, min, max; and pi, e, tau. Angles are in radians.

    Args:
        expression: The expression, in Python syntax.
    """
    value = evaluate(expression)
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"the result is {value!r}, not a finite number")
    return _render(value)
