"""What the web page shows besides runs: the server's setup (`GET /v1/config`) and what the caller's runs used
and cost by day and model (`GET /v1/usage`, what `shou usage` reports, for one user's sessions only)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from importlib.metadata import version
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..usage_report import UsageRow, usage_report, usage_total
from .server import Server, whole_number

__all__ = ["CURRENCY_SYMBOLS", "server_config", "usage"]

CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "CNY": "¥", "INR": "₹", "KRW": "₩",
                    "CHF": "CHF ", "CAD": "CA$", "AUD": "A$"}
MAX_DAYS = 3660


async def server_config(request: Request) -> Response:
    """`GET /v1/config`: shou's version, the model and tools runs get, and the currency costs are shown in (a
    cost is kept in USD; `per_usd` converts it for showing)."""
    srv: Server = request.app.state.server
    srv.user(request)
    agent = srv.runner.agent
    settings = agent.settings
    code = str(getattr(settings, "currency", "USD") or "USD").upper()
    return JSONResponse({
        "version": version("shou"), "model": agent.model.name, "tools": list(agent.tools.names),
        "currency": {"code": code, "symbol": CURRENCY_SYMBOLS.get(code, code + " "),
                     "per_usd": float(getattr(settings, "currency_per_usd", 1.0) or 1.0)},
    })


async def usage(request: Request) -> Response:
    """`GET /v1/usage?days=N`: the caller's usage by UTC day and model over the last N days (default 30),
    costs in USD (null where some call's price is unknown), and the total."""
    srv: Server = request.app.state.server
    user = srv.user(request)
    raw = request.query_params.get("days", "30")
    days = whole_number(raw)
    if days is None or not 1 <= days <= MAX_DAYS:
        raise HTTPException(400, f"days must be a whole number from 1 to {MAX_DAYS}, not {raw[:20]!r}")
    since = time.time() - days * 86400
    rows = await asyncio.to_thread(_rows, srv, user, since)
    return JSONResponse({"days": days, "rows": [_plain(r) for r in rows], "total": _plain(usage_total(rows))})


def _rows(srv: Server, user: str, since: float) -> list[UsageRow]:
    owners: dict[str, bool] = {}

    class Mine:
        """The caller's sessions, asked of the run queue once each."""

        def __contains__(self, name: object) -> bool:
            if not isinstance(name, str):
                return False
            if name not in owners:
                owners[name] = srv.queue.session_owner(name) == user
            return owners[name]

    return usage_report(srv.store, ("day", "model"), since, Mine())


def _plain(row: UsageRow) -> dict[str, Any]:
    out = asdict(row)
    out.pop("session", None)
    return out

