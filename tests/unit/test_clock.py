"""current_time: ISO 8601 with the right offset for a zone, the local zone named, unknown zones refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.tools.base import ToolContext
from shou.tools.builtin.clock import _describe, current_time

SUMMER = datetime(2024, 7, 1, 12, 0, 0, tzinfo=UTC)  # a Monday
WINTER = datetime(2024, 1, 15, 12, 0, 0, tzinfo=UTC)  # a Monday too


async def call(**args: object) -> object:
    return await current_time.call(current_time.validate(args), ToolContext(Path(".")))


@pytest.fixture
def restore_tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Lets a test change $TZ; the C library is told again once the old value is back."""
    yield monkeypatch
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("instant", "zone", "expected"),
    [
        (SUMMER, "Europe/Paris", "2024-07-01T14:00:00+02:00, Monday (time zone Europe/Paris)"),
        (WINTER, "Europe/Paris", "2024-01-15T13:00:00+01:00, Monday (time zone Europe/Paris)"),
        (SUMMER, "Asia/Shanghai", "2024-07-01T20:00:00+08:00, Monday (time zone Asia/Shanghai)"),
        (SUMMER, "America/New_York", "2024-07-01T08:00:00-04:00, Monday (time zone America/New_York)"),
        (SUMMER, "Pacific/Kiritimati", "2024-07-02T02:00:00+14:00, Tuesday (time zone Pacific/Kiritimati)"),
        (SUMMER, "UTC", "2024-07-01T12:00:00+00:00, Monday (time zone UTC)"),
        (SUMMER, "europe/paris", "2024-07-01T14:00:00+02:00, Monday (time zone Europe/Paris)"),
    ],
)
def test_named_zone_gives_the_right_offset(instant: datetime, zone: str, expected: str) -> None:
    assert _describe(instant, zone) == expected


def test_local_zone_is_named(restore_tz: pytest.MonkeyPatch) -> None:
    restore_tz.setenv("TZ", "Asia/Tokyo")
    out = _describe(SUMMER, None)
    assert out.startswith("2024-07-01T21:00:00+09:00, Monday (time zone Asia/Tokyo")
    assert "local" in out
    assert _describe(SUMMER, "  ") == out


def test_local_zone_without_an_iana_name_uses_the_c_library(restore_tz: pytest.MonkeyPatch) -> None:
    restore_tz.setenv("TZ", "ABC-3")  # a POSIX rule, not an IANA name: 3 hours east of UTC
    time.tzset()
    out = _describe(SUMMER, None)
    assert out.startswith("2024-07-01T15:00:00+03:00, Monday (time zone ABC")
    assert "local" in out


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "../../etc/passwd", "/etc/localtime", "a\0"])
async def test_unknown_zone_is_a_tool_error_with_examples(zone: str) -> None:
    with pytest.raises(ToolError, match=r"unknown time zone .*'Europe/Paris'.*'Asia/Shanghai'.*'UTC'"):
        await call(timezone=zone)


async def test_misspelt_zone_gets_a_suggestion() -> None:
    with pytest.raises(ToolError, match=r"did you mean 'Europe/Paris'"):
        await call(timezone="Europe/Pariss")


async def test_tool_returns_the_current_time() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    out = await call(timezone="Asia/Shanghai")
    after = datetime.now(UTC)
    assert isinstance(out, str)
    stamp = datetime.fromisoformat(out.split(",")[0])
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 8 * 3600
    assert before <= stamp <= after
    assert out.endswith("(time zone Asia/Shanghai)")
    assert f"{stamp:%A}" in out
