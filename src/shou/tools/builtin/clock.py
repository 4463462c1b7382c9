"""`current_time`: the date and time now, in the local time zone or a named IANA one."""

from __future__ import annotations

import difflib
import os
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from ...errors import ToolError
from ..base import tool

__all__ = ["current_time"]

_EXAMPLES = "'Europe/Paris', 'Asia/Shanghai', 'America/New_York' or 'UTC'"


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    # Scans the zone database on disk, so only done when a name is not found as typed.
    return {name.lower(): name for name in available_timezones()}


def _load(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    # Bad keys fail in several ways: not found, a folder such as 'Europe', '..' or NUL in the name.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def _zone(name: str) -> tuple[ZoneInfo, str]:
    zone = _load(name)
    if zone is not None:
        return zone, name
    canonical = _zone_names().get(name.lower())
    if canonical is not None and (zone := _load(canonical)) is not None:
        return zone, canonical  # the model wrote 'europe/paris'
    close = difflib.get_close_matches(name, list(_zone_names().values()), n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise ToolError(f"unknown time zone {name!r}; {hint}use an IANA name such as {_EXAMPLES}")


def _local_zone_name() -> str | None:
    """The IANA name of the local zone when it can be told: from $TZ or the /etc/localtime link."""
    key = os.environ.get("TZ", "").lstrip(":")
    if not key:
        try:
            target = os.readlink("/etc/localtime")
        except OSError:
            return None
        key = target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else ""
    return key if key and _load(key) is not None else None


def _describe(now: datetime, timezone: str | None) -> str:
    """Describe the aware instant `now` in `timezone` (None: the local zone); split out for tests."""
    if timezone is not None and timezone.strip():
        zone, name = _zone(timezone.strip())
        local, suffix = now.astimezone(zone), ""
    else:
        key = _local_zone_name()
        if key is not None:
            local, name = now.astimezone(ZoneInfo(key)), key
        else:
            # No IANA name (e.g. TZ holds a POSIX rule): the C library still knows the offset.
            local = now.astimezone()
            name = local.tzname() or "local time"
        suffix = ", the local time zone; pass timezone for another"
    return f"{local.isoformat(timespec='seconds')}, {local:%A} (time zone {name}{suffix})"


@tool(idempotent=True)
def current_time(timezone: str | None = None) -> str:
    """Get the current date and time (ISO 8601 with UTC offset) and the weekday.

    Args:
        timezone: IANA time zone name such as 'Europe/Paris' or 'UTC'; omit for the local time zone.
    """
    return _describe(datetime.now(UTC), timezone)
