"""`CappedLines` reads a real process's stdout as whole lines, and an oversized one becomes a short reply to the
request it answered, wherever its library puts the id."""

from __future__ import annotations

import json
import sys

import anyio

from shou.mcp import stdio
from shou.mcp.stdio import TOO_BIG, CappedLines

# Lines the child prints: a small message, a huge one with its id last (as TypeScript's SDK writes), a huge
# one with an id only inside its result (it answers no request: dropped), a huge text result with its id first.
CHILD = r"""
import json, sys
big = "z" * 3_000_000
out = sys.stdout
out.write(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}) + "\n")
out.write('{"result":{"content":[{"type":"text","text":"' + big + '"}]},"id":"b-2","jsonrpc":"2.0"}\n')
out.write('{"result":{"items":[{"id":9,"v":"' + big + '"}]}}\n')
out.write('{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"caf\\u00e9 ' + big + '"}]}}\n')
out.write('{"jsonrpc":"2.0","id":5,"result":{}}')  # no newline: not a message
"""


async def _lines(limit: int) -> list[str]:
    async with await anyio.open_process([sys.executable, "-c", CHILD]) as proc:
        reader = CappedLines(proc.stdout)
        reader.limit = limit
        return [line async for line in reader]


async def test_oversized_lines_are_answered_short_and_small_ones_pass() -> None:
    lines = await _lines(1_000_000)
    assert all(line.endswith("\n") for line in lines)
    small, id_last, text_first = (json.loads(line) for line in lines)
    assert small == {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}
    assert id_last["id"] == "b-2" and id_last["error"]["code"] == TOO_BIG
    assert "over the 1,000,000 shou reads" in id_last["error"]["message"]
    assert text_first["id"] == 4 and text_first["result"]["isError"]
    text = text_first["result"]["content"][0]["text"]
    assert text.startswith("café zzz") and "ask for less" in text and len(text) < 40_000
    assert max(len(line) for line in lines) < 40_000


async def test_under_the_bound_nothing_changes() -> None:
    lines = await _lines(10_000_000)
    assert [len(line) for line in lines][1:] == [3_000_078, 3_000_039, 3_000_084]  # each whole, with its newline
    assert json.loads(lines[3])["result"]["content"][0]["text"].startswith("café zzz")


def test_install_puts_the_bound_in_the_sdk_reader() -> None:
    import mcp.client.stdio as sdk

    stdio.install()
    assert sdk.TextReceiveStream is CappedLines
