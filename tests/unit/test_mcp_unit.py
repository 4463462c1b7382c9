"""MCP server settings, tool names and result conversion (no server needed)."""

from __future__ import annotations

import mcp_types as types
import pytest

from shou.errors import UserError
from shou.mcp.servers import ServerSpec
from shou.mcp.tools import convert, tool_name


def test_server_tables_are_checked() -> None:
    spec = ServerSpec.from_table("t", {"command": "srv", "args": ["-x"], "env": {"B": "2", "A": "1"}, "timeout": 5})
    assert (spec.command, spec.args, spec.env, spec.timeout) == ("srv", ("-x",), (("A", "1"), ("B", "2")), 5.0)
    assert hash(spec) == hash(ServerSpec.from_table("t", {"command": "srv", "args": ["-x"], "timeout": 5,
                                                          "env": {"A": "1", "B": "2"}}))
    for bad, why in [({}, "either command"), ({"command": "a", "url": "http://x"}, "either command"),
                     ({"url": "file:///etc/passwd"}, "http://"), ({"command": "a", "args": "x"}, "list of strings"),
                     ({"command": "a", "env": {"A": 1}}, "table of strings"),
                     ({"command": "a", "timeout": 0}, "positive"),
                     ({"command": "a", "shell": True}, "unknown key")]:
        with pytest.raises(UserError, match=why):
            ServerSpec.from_table("t", bad)


def test_tool_names_are_safe_for_every_provider() -> None:
    assert tool_name("git", "git_log") == "git__git_log"
    assert tool_name("my server", "do.thing/now") == "my_server__do_thing_now"
    assert len(tool_name("s" * 40, "t" * 40)) == 64


def test_results_are_passed_on_faithfully() -> None:
    image = types.ImageContent(type="image", data="aGk=", mime_type="image/png")
    text = types.TextContent(type="text", text="hello")
    got = convert(types.CallToolResult(content=[text, image], structured_content={"n": 1}))
    assert (got.content, got.image.data, got.is_error) == ("hello", "aGk=", False)
    assert got.details == {"structured": {"n": 1}}
    only = convert(types.CallToolResult(content=[], structured_content={"n": 2}))
    assert only.content == '{"n": 2}'
    failed = convert(types.CallToolResult(content=[types.TextContent(type="text", text="no such zone")], is_error=True))
    assert failed.is_error and failed.content == "no such zone"
    assert convert(types.CallToolResult(content=[], is_error=True)).content.startswith("Error")
