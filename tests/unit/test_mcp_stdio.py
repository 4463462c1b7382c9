"""`CappedLines` reads a real process's stdout as whole lines, and an oversized one becomes a short reply to the
request it answered, wherever its library puts the id."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from shou.mcp import stdio
from shou.mcp.stdio import PARSE_ERROR, TOO_BIG, CappedLines

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


DEEP = "[" * 3000 + "]" * 3000  # past what the SDK's parser (and Python's) takes


@pytest.mark.parametrize(("line", "answers"), [
    ('{"jsonrpc":"2.0","id":7,"result":{"d":' + DEEP + "}}", 7),
    ('{"result":{"d":' + DEEP + '},"jsonrpc":"2.0","id":"a-1"}', "a-1"),  # the id last
    ('{ "jsonrpc": "2.0", "id": -2, "error": {"code": 1, "message": "m", "data": ' + DEEP + "}}", -2),
    ('{"jsonrpc":"2.0","id":3,"result":[1]}', 3),  # JSON, but no JSON-RPC message
    ('{"jsonrpc":"2.0","id":3,"error":{"code":"x"}}', 3),
    ('{"jsonrpc":"2.0","id":3,"result":{"a":1}', 3),  # cut short
    ('{"jsonrpc":"2.0","id":3,"method":"ping","params":' + DEEP + "}", None),  # the server's own request
    ('{"jsonrpc":"2.0","id":3,"method":"ping","params":7}', None),
    ('{"jsonrpc":"2.0","id":true,"result":[1]}', None),  # no request has that id
    ('{"result":{"items":[{"id":9}]}}', None),  # an id only inside
    ("a line of a server's log", None), ("", None)])
def test_a_reply_the_sdk_cannot_read_answers_its_request_at_once(line: str, answers: object) -> None:
    """The SDK drops a line it cannot read (the session only logs it): the call it answered waited for its
    timeout. Such a reply now answers that request with an error; a line that answers no request is left."""
    out = CappedLines(None)._readable(line)
    if answers is None:
        assert out is line
        return
    reply = json.loads(out)
    assert reply["id"] == answers and reply["error"]["code"] == PARSE_ERROR
    assert "could not be read as a JSON-RPC message" in reply["error"]["message"]
    assert len(reply["error"]["message"]) < 400


def test_a_message_the_sdk_reads_is_passed_as_it_is() -> None:
    for line in ['{"jsonrpc":"2.0","id":1,"result":{"content":[]}}', '{"jsonrpc":"2.0","method":"notifications/x"}',
                 '{"jsonrpc":"2.0","id":"q","method":"ping"}',
                 '{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}']:
        assert CappedLines(None)._readable(line) is line
