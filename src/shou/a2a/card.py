"""A remote agent's card: read once (bounded in size and time), checked, cached for the process.

The card is read from the configured URL (`URL/.well-known/agent-card.json`, or the URL itself when it names
a `.json` file) through the agent's client (shou.a2a.http): at most `CARD_LIMIT` bytes, within
`CARD_TIMEOUT` seconds (or the agent's own timeout when shorter), parsed by the SDK. A card is the remote
side's word, so it may describe the agent but decide nothing: of the endpoints it names only those at the
configured origin are kept (a card naming none there is refused, never followed elsewhere), and its
security schemes, capabilities and extensions ask shou for nothing (the headers sent are the configured
ones). Its description and skills reach the model as the tool's description, cut to `DESCRIPTION_CHARS`.

A card read is kept for `CARD_TTL` seconds; a failure for `FAILED_TTL`, so the runs starting meanwhile do not
each wait for an agent that is down (a call still tries again, and says why it cannot).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from .http import OtherOrigin, TooBig, agent_client
from .spec import RemoteAgentSpec, origin_of

if TYPE_CHECKING:
    from a2a.types import AgentCard

__all__ = ["CARD_LIMIT", "CardError", "card_for", "card_json", "card_url", "describe", "fetch_card", "read_card",
           "usable"]

CARD_LIMIT = 1024 * 1024
CARD_TIMEOUT = 15.0
CARD_TTL = 3600.0
FAILED_TTL = 60.0
DESCRIPTION_CHARS = 2000  # of the card's own words in the tool's description: sent with every request
BINDINGS = ("JSONRPC", "HTTP+JSON")
_CACHE: dict[RemoteAgentSpec, tuple[float, AgentCard | str]] = {}


class CardError(Exception):
    """The card could not be read, or is not one shou can use; the message says why."""


def card_url(url: str) -> str:
    """Where the card of the agent at `url` is: the well-known path under it, or `url` itself when it names a
    JSON file."""
    if url.split("?", 1)[0].endswith(".json"):
        return url
    return url.rstrip("/") + "/.well-known/agent-card.json"


async def fetch_card(spec: RemoteAgentSpec) -> AgentCard:
    """Read and check `spec`'s card now: only its endpoints shou may use (`CardError` says why it cannot be
    used)."""
    return usable(await read_card(spec), spec)


async def read_card(spec: RemoteAgentSpec) -> AgentCard:
    """Read `spec`'s card now, as the agent wrote it (`CardError` when it cannot be read or parsed)."""
    import httpx
    import orjson
    from a2a.client.card_resolver import parse_agent_card

    limit = min(CARD_TIMEOUT, spec.timeout)
    what = f"the card of the A2A agent {spec.name!r} ({spec.where})"
    try:
        async with asyncio.timeout(limit), agent_client(spec, limit=CARD_LIMIT) as client:
            response = await client.get(card_url(spec.url))
            if response.status_code != 200:
                raise CardError(f"{what} could not be read: HTTP {response.status_code}")
            data = orjson.loads(response.content)
    except TimeoutError:
        raise CardError(f"{what} was not read within {limit:g} s") from None
    except orjson.JSONDecodeError as e:
        raise CardError(f"{what} is not valid JSON: {e}") from None
    except TooBig:
        raise CardError(f"{what} is larger than {CARD_LIMIT:,} bytes, the most shou reads of a card") from None
    except OtherOrigin as e:
        raise CardError(str(e)) from None
    except httpx.HTTPError as e:
        raise CardError(f"{what} could not be read: {e or type(e).__name__}") from None
    try:
        card = parse_agent_card(data)
    except Exception as e:  # the SDK's ParseError, or a shape its compatibility code did not expect
        raise CardError(f"{what} is not an agent card: {str(e)[:300]}") from None
    return card


def usable(card: AgentCard, spec: RemoteAgentSpec) -> AgentCard:
    """`card` with only the endpoints at the configured origin that shou speaks (JSON-RPC, HTTP+JSON);
    `CardError` when there is none."""
    from a2a.types import AgentCard

    what = f"the card of the A2A agent {spec.name!r} ({spec.where})"
    kept, elsewhere = [], []
    for interface in card.supported_interfaces:
        try:
            same = origin_of(interface.url) == spec.origin
        except ValueError:
            same = False
        if not same:
            elsewhere.append(interface.url[:100])
        elif interface.protocol_binding in BINDINGS:
            kept.append(interface)
    if not kept:
        if elsewhere:
            raise CardError(f"{what} names endpoints elsewhere ({', '.join(elsewhere[:3])}), not at the address "
                            "configured; shou sends nothing there. Configure the agent's own address as its url")
        raise CardError(f"{what} names no JSON-RPC or HTTP+JSON endpoint shou can use")
    trimmed = AgentCard()
    trimmed.CopyFrom(card)
    del trimmed.supported_interfaces[:]
    trimmed.supported_interfaces.extend(kept)
    return trimmed


async def card_for(spec: RemoteAgentSpec, *, fresh: bool = False) -> AgentCard:
    """`spec`'s card, from the cache when it was read (or failed) lately; `fresh` reads it again unless it is
    cached as read. `CardError` when it cannot be used."""
    now = time.monotonic()
    cached = _CACHE.get(spec)
    if cached is not None and now < cached[0] and not (fresh and isinstance(cached[1], str)):
        if isinstance(cached[1], str):
            raise CardError(cached[1])
        return cached[1]
    try:
        card = await fetch_card(spec)
    except CardError as e:
        _CACHE[spec] = (now + FAILED_TTL, str(e))
        raise
    _CACHE[spec] = (now + CARD_TTL, card)
    return card


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def describe(spec: RemoteAgentSpec, card: AgentCard | None, problem: str = "") -> str:
    """The tool's description: the configured one or the card's (its description and skills, cut), and how
    to call it."""
    if spec.description:
        about = _cut(spec.description, DESCRIPTION_CHARS)
    elif card is not None:
        skills = "; ".join(f"{s.name or s.id}: {s.description.strip().rstrip('.')}" if s.description.strip()
                           else (s.name or s.id) for s in list(card.skills)[:20])
        about = _cut(f"{card.name}: {card.description}" + (f" Skills: {skills}." if skills else ""), DESCRIPTION_CHARS)
    else:
        about = f"(its card could not be read: {_cut(problem, 300)})"
    return (f"[A2A agent {spec.name} at {spec.where}] {about} Send it a complete, self-contained message: it sees "
            "nothing of this conversation. If it asks a question back, answer by calling this tool again with your "
            "answer as message and the task_id and context_id it gave; pass context_id alone to continue an "
            "earlier conversation with it.")


def card_json(card: Any) -> dict[str, Any]:
    """The card as JSON (camelCase, as it travels)."""
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(card)
