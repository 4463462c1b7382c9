"""What the table settings may hold: `[agents.NAME]`, `[mcp_servers.NAME]`, `[a2a_agents.NAME]`,
`[guardrails.NAME]` and `[models."NAME"]`.

Checked when settings load (shou.settings converts), so a bad table is refused before any run; the
specs built from them later (shou.agent.delegate, shou.mcp.servers, shou.a2a.spec, shou.pricing) rely on these
checks.
Foundation layer: it imports nothing of shou but its errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .errors import UserError

__all__ = ["AGENT_KEYS", "GUARDRAIL_KEYS", "MAIN_AGENT", "PRICE_KEYS", "REMOTE_AGENT_KEYS", "SERVER_KEYS",
           "WINDOW_RANGE", "check_agent_table", "check_guardrail_table", "check_remote_agent_table",
           "check_server_table", "named_tables", "price_tables"]

AGENT_KEYS = ("instructions", "model", "tools", "max_steps", "description", "handoff")
MAIN_AGENT = "main"  # what handoffs and traces call a run's own agent: no named agent takes it over
SERVER_KEYS = ("command", "args", "env", "url", "headers", "timeout", "description")
REMOTE_AGENT_KEYS = ("url", "headers", "timeout", "description")
GUARDRAIL_KEYS = ("on", "function", "rule", "model", "description")
PRICE_KEYS = ("input_price", "cached_input_price", "output_price")
WINDOW_RANGE = (1024, 100_000_000)  # what `[models."NAME"] context_window` may be set to


def _unknown(where: str, table: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")


def check_agent_table(name: str, table: Mapping[str, Any]) -> None:
    """`UserError` saying what is wrong with an `[agents.NAME]` table, if anything is."""
    where = f"[agents.{name}]"
    _unknown(where, table, AGENT_KEYS)
    tools = table.get("tools")
    if tools is not None and (not isinstance(tools, list | tuple) or not all(isinstance(t, str) for t in tools)):
        raise UserError(f"{where} tools must be a list of tool names")
    steps = table.get("max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise UserError(f"{where} max_steps must be a positive whole number")
    for key in ("instructions", "model", "description"):
        if table.get(key) is not None and not isinstance(table[key], str):
            raise UserError(f"{where} {key} must be text")
    handoff = table.get("handoff", False)
    if not isinstance(handoff, bool):
        raise UserError(f"{where} handoff must be true or false")
    if handoff and name == MAIN_AGENT:
        raise UserError(f"{where}: {MAIN_AGENT!r} is the name of the run's own agent in handoffs; choose another "
                        "name for an agent that takes a conversation over")


def check_server_table(name: str, table: Mapping[str, Any]) -> None:
    """`UserError` saying what is wrong with a `[mcp_servers.NAME]` table, if anything is."""
    where = f"[mcp_servers.{name}]"
    _unknown(where, table, SERVER_KEYS)
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise UserError(f"{where} needs either command (a server shou starts) or url (one that runs), not both")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise UserError(f"{where} command must be the program to run")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise UserError(f"{where} url must be an http:// or https:// address")
    args = table.get("args", [])
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        raise UserError(f"{where} args must be a list of strings")
    for key in ("env", "headers"):
        value = table.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise UserError(f"{where} {key} must be a table of strings")
    timeout = table.get("timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise UserError(f"{where} timeout must be a positive number of seconds")


def check_remote_agent_table(name: str, table: Mapping[str, Any]) -> None:
    """`UserError` saying what is wrong with an `[a2a_agents.NAME]` table (a remote A2A agent), if anything is."""
    where = f"[a2a_agents.{name}]"
    _unknown(where, table, REMOTE_AGENT_KEYS)
    url = table.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UserError(f"{where} needs url, the agent's http:// or https:// address (its card is at "
                        "URL/.well-known/agent-card.json)")
    headers = table.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise UserError(f"{where} headers must be a table of strings")
    timeout = table.get("timeout", 300.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise UserError(f"{where} timeout must be a positive number of seconds")
    if table.get("description") is not None and not isinstance(table["description"], str):
        raise UserError(f"{where} description must be text")


def check_guardrail_table(name: str, table: Mapping[str, Any]) -> None:
    """`UserError` saying what is wrong with a `[guardrails.NAME]` table, if anything is: `on` is `input` or
    `output`, and it holds either `function` (`module:function` or `file.py:function`) or `rule` (text a model
    judges against)."""
    where = f"[guardrails.{name}]"
    _unknown(where, table, GUARDRAIL_KEYS)
    if table.get("on") not in ("input", "output"):
        raise UserError(f'{where} needs on = "input" (checks the task) or on = "output" (checks the answer)')
    function, rule = table.get("function"), table.get("rule")
    if (function is None) == (rule is None):
        raise UserError(f'{where} needs either function = "module:function" or rule = "..." (not both)')
    if function is not None and (not isinstance(function, str) or function.count(":") != 1
                                 or not all(part.strip() for part in function.split(":"))):
        raise UserError(f'{where} function must be "module:function" or "file.py:function"')
    if rule is not None and (not isinstance(rule, str) or not rule.strip()):
        raise UserError(f"{where} rule must be the text of the rule")
    if table.get("model") is not None and (function is not None or not isinstance(table["model"], str)):
        raise UserError(f"{where} model names the model that judges a rule (text), and only a rule has one")
    if table.get("description") is not None and not isinstance(table["description"], str):
        raise UserError(f"{where} description must be text")


_CHECKS: dict[str, tuple[Callable[[str, Mapping[str, Any]], None], str]] = {
    "agents": (check_agent_table, "instructions, model, tools, max_steps, description, handoff"),
    "mcp_servers": (check_server_table, "command, args, env (stdio) or url, headers; timeout"),
    "a2a_agents": (check_remote_agent_table, "url, headers, timeout, description"),
    "guardrails": (check_guardrail_table, "on, and function or rule (model, description)"),
}

TABLES = tuple(_CHECKS)  # the settings made of `[KEY.NAME]` tables


def named_tables(raw: Any, key: str) -> dict[str, dict[str, Any]]:
    """`[KEY.NAME]` tables (`agents`, `mcp_servers`, `a2a_agents`, `guardrails`), each checked (a `UserError` is a
    `ValueError` here: the setting's error)."""
    check, fields = _CHECKS[key]
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ValueError(f"expected tables [{key}.NAME] with {fields}")
    for name, table in raw.items():
        if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"[{key}.{name}]: a name is letters, digits, - and _")
        try:
            check(name, table)
        except UserError as e:
            raise ValueError(str(e)) from None
    return {str(k): dict(v) for k, v in raw.items()}


def price_tables(raw: Any) -> dict[str, dict[str, float]]:
    """`[models."NAME"]` tables: prices, USD per million tokens, none negative, and the model's
    `context_window` in tokens (a whole number in `WINDOW_RANGE`). Whether a model without both prices has
    built-in ones is for the loader to say (shou.config: the built-in prices are shou.pricing's)."""
    if not isinstance(raw, dict):
        raise ValueError('expected tables [models."NAME"] with input_price, output_price, cached_input_price, '
                         "context_window")
    out: dict[str, dict[str, float]] = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise ValueError(f'[models."{name}"] must be a table of prices and context_window')
        unknown = sorted(set(entry) - {*PRICE_KEYS, "context_window"})
        if unknown:
            raise ValueError(f'[models."{name}"]: unknown key(s) {", ".join(map(str, unknown))}; known: '
                             f"{', '.join(PRICE_KEYS)}, context_window")
        out[str(name)] = {key: _window(name, value) if key == "context_window" else _price(name, key, value)
                          for key, value in entry.items()}
    return out


def _price(name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f'[models."{name}"] {key} must be a finite number of US dollars per million '
                         "tokens, not negative")
    return float(value)


def _window(name: str, value: Any) -> int:
    low, high = WINDOW_RANGE
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f'[models."{name}"] context_window must be a whole number of tokens from {low:,} to '
                         f"{high:,}, not {value!r}")
    return value
