"""What an MCP server's table holds that may be a credential (shou.redact.server_secrets), and how a server
is described without it (`ServerSpec.where`)."""

from __future__ import annotations

import base64

from shou.known_secrets import secrets_of
from shou.mcp.servers import ServerSpec
from shou.redact import Redactor
from shou.redact_servers import server_secrets


def test_every_way_a_table_carries_a_credential_is_found() -> None:
    table = {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-github", "--token=tok-1111aaaa", "--api-key", "key-2222bbbb",
                 "--header", "Authorization: Bearer hdr-3333cccc", "--db=postgres://u:pw-4444dddd@db/x",
                 "-e", "SLACK_BOT_TOKEN=xoxb-5555eeee", "ghp_6666ffffGGGG7777hhhh"],
        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "pat-8888iiii", "TZ": "Europe/Berlin",
                "UPSTREAM_URL": "https://me:pw-9999jjjj@up.example/?sig=sig-0000kkkk"},
        "headers": {"Authorization": "Bearer auth-1212llll", "Content-Type": "application/json",
                    "Proxy-Authorization": "Basic " + base64.b64encode(b"me:basic-3434mmmm").decode()},
    }
    found = server_secrets(table)
    for secret in ("tok-1111aaaa", "key-2222bbbb", "hdr-3333cccc", "pw-4444dddd", "xoxb-5555eeee",
                   "ghp_6666ffffGGGG7777hhhh", "pat-8888iiii", "pw-9999jjjj", "sig-0000kkkk", "auth-1212llll",
                   "Bearer auth-1212llll", "basic-3434mmmm", "me:basic-3434mmmm"):
        assert secret in found, secret
    # what describes the server (its package, its flags) is not hidden from every event
    for plain in ("@modelcontextprotocol/server-github", "-y", "--header"):
        assert plain not in found, plain


def test_settings_servers_are_secret_sources() -> None:
    class Settings:
        def __init__(self) -> None:
            self.mcp_servers = {"t": {"url": "https://u:pass-3434zzzz@h.example/mcp?api_key=q-5656yyyy"}}

    r = Redactor(secrets_of(Settings(), environ={}))
    assert r.text("pass-3434zzzz and q-5656yyyy") == "[redacted] and [redacted]"


def test_a_server_is_described_without_its_credentials() -> None:
    web = ServerSpec.from_table("w", {"url": "https://u:pw-4444dddd@mcp.example:8443/s/abcd1234efgh5678ijkl/mcp?key=zz"
                                                 "zz9999", "headers": {"X-Key": "hdr-3333cccc"}})
    assert web.where == "https://mcp.example:8443/s/***/mcp"
    assert "hdr-3333cccc" not in repr(web) and "pw-4444dddd" not in repr(web)
    local = ServerSpec.from_table("l", {"command": "/usr/bin/python3", "args": ["-m", "srv", "--token=tok-1111aaaa"],
                                        "env": {"API_KEY": "key-2222bbbb"}})
    assert local.where == "python3 -m srv"
    assert "tok-1111aaaa" not in repr(local) and "key-2222bbbb" not in repr(local)
    assert ServerSpec.from_table("s", {"command": "uvx", "args": ["sk-live-1234567890abcdef"]}).where == "uvx"
    assert ServerSpec.from_table("s", {"command": "uvx", "args": ["mcp-server-time"]}).where == "uvx mcp-server-time"


def test_a_credential_named_nothing_secret_is_still_found() -> None:
    """Second review: a path token, `?code=`, a fragment, `-p VALUE` and any env or header value."""
    table = {"url": "https://h.example/api/mcp/s/PathTok9Xq2Lm4Np7Rt/mcp?code=AzCode5Qw12Er34Ty#FragTok7Hh3Jj9Kk",
             "args": ["-c", "print(1)", "-p", "hunter2pw", "-m", "my.module", "--dir", "/srv/data"],
             "env": {"DB_PASSPHRASE": "correct horse battery staple"},
             "headers": {"X-Custom": "hdrvalue99"}}
    found = server_secrets(table)
    for secret in ("PathTok9Xq2Lm4Np7Rt", "AzCode5Qw12Er34Ty", "FragTok7Hh3Jj9Kk", "hunter2pw",
                   "correct horse battery staple", "hdrvalue99"):
        assert secret in found, secret
    for plain in ("my.module", "/srv/data", "--dir"):
        assert plain not in found, plain
    # what is masked when the server is shown is exactly what is redacted
    assert ServerSpec.from_table("s", table).where == "https://h.example/api/mcp/s/***/mcp"
