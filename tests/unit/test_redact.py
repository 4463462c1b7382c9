"""The redactor: every known secret goes, wherever it sits in an event; an event without one is returned
as the same object (every event passes through it)."""

from __future__ import annotations

from shou.events import ModelRequest, ModelResponse, ToolCallFinished, ToolCallStarted
from shou.messages import Message, TextPart, ToolCall
from shou.redact import REDACTED, Redactor
from shou.usage import Usage

KEY = "sk-live-0123456789abcdef"


def test_secrets_are_replaced_everywhere_an_event_holds_text() -> None:
    r = Redactor([KEY])
    call = ToolCall("c1", "shell", '{"command": "curl -H \\"x: \\u0073k-live-0123456789abcdef\\""}')
    msg = Message.assistant(f"the key is {KEY}", [call])
    out = r.event(ModelResponse("r", 1, msg, Usage(), 0.1))
    assert KEY not in out.message.text and REDACTED in out.message.text
    assert "0123456789abcdef" not in out.message.tool_calls[0].arguments  # spelled with a JSON escape too
    done = r.event(ToolCallFinished("r", 1, "c1", "shell", f"out {KEY}", details={"env": [KEY, 3]}))
    assert KEY not in done.content and done.details == {"env": [REDACTED, 3]}
    parts = Message.user((TextPart(f"see {KEY}"),))
    assert KEY not in str(r.value(parts).content)
    from shou.agent.recorder import RequestRecorder

    recorder = RequestRecorder(set(), r)  # a request's contents are redacted as the recorder takes them
    recorder.messages([Message.user(f"use {KEY}")])
    assert KEY not in str(recorder.take())


def test_an_event_without_secrets_is_the_same_object() -> None:
    r = Redactor([KEY])
    events = [ModelResponse("r", 1, Message.assistant("fine", [ToolCall("c", "calc", '{"x": 1}')]), Usage(), 0.1),
              ToolCallStarted("r", 1, ToolCall("c", "calc", '{"x": "\\u0031"}')),
              ToolCallFinished("r", 1, "c", "calc", "1", details={"a": [1, "b"]}),
              ModelRequest("r", 1, 2, 0, messages=("a", "b"), contents={"a": {"role": "user", "content": "x"}})]
    for event in events:
        assert r.event(event) is event


def test_checked_passes_clean_events_with_their_json_and_redacts_the_rest() -> None:
    import orjson

    r = Redactor([KEY, 'pa"ss\\word-1234'])
    clean = ToolCallFinished("r", 1, "c", "calc", "42")
    same, data = r.checked(clean)
    assert same is clean and data == orjson.dumps(clean.to_dict())
    for dirty in (ToolCallFinished("r", 1, "c", "calc", f"out {KEY}"),
                  ToolCallFinished("r", 1, "c", "calc", 'out pa"ss\\word-1234'),  # escaped in JSON
                  ToolCallStarted("r", 1, ToolCall("c", "sh", '{"x": "\\u0073k-live-0123456789abcdef"}'))):
        out, data = r.checked(dirty)
        assert data is None and out is not dirty
        assert KEY not in str(out.to_dict()) and "0123456789abcdef" not in str(out.to_dict())
        assert 'pa"ss' not in str(out.to_dict())


def test_what_a_url_carries_is_found_as_the_client_reads_it() -> None:
    from shou.redact import url_secrets

    cases = {  # url -> what must be found among its secrets
        "http://bob:Secretpw1x@host/v1/@cf": {"Secretpw1x", "bob:Secretpw1x", "Ym9iOlNlY3JldHB3MXg="},
        "http://bob:Secretpw1x@host/v1?x=@y": {"Secretpw1x", "Ym9iOlNlY3JldHB3MXg="},
        "http://sk-live-abcdef123456@host/v1": {"sk-live-abcdef123456", "c2stbGl2ZS1hYmNkZWYxMjM0NTY6"},
        "http://u:p%40ss-Secret9@[::1]:8080/v1": {"p@ss-Secret9", "p%40ss-Secret9"},
        "https://h/hook?token=abc%2Fdef12345&x=1": {"abc/def12345", "abc%2Fdef12345"},
    }
    for url, wanted in cases.items():
        assert wanted <= url_secrets(url), url


def test_a_common_password_in_someone_elses_url_does_not_blank_out_the_word() -> None:
    """`DATABASE_URL=postgres://postgres:postgres@...` is the project's, not a URL shou sends to: its pair goes,
    never the word "postgres" from every answer. A planted `.env` cannot make a word a secret either."""
    from shou.known_secrets import secrets_of

    found = secrets_of(None, {"DATABASE_URL": "postgres://postgres:postgres@localhost:5432/app",
                              "REDIS_URL": "redis://default:Xk29-fPq7-Lm3z@cache:6379",
                              "HTTPS_PROXY": "http://me:plainword@proxy:3128"})
    assert "postgres" not in found and "postgres:postgres" in found
    assert "Xk29-fPq7-Lm3z" in found  # looks like a key: found wherever it appears
    assert "plainword" in found  # a proxy shou sends through: its password goes, whatever it looks like


def test_an_untrusted_dotenv_cannot_make_an_ordinary_word_a_secret(tmp_path) -> None:
    from types import SimpleNamespace

    from shou.known_secrets import secrets_of

    (tmp_path / ".env").write_text("FOO_KEY=function\nBAR_TOKEN=sk-proj-9f8e7d6c5b4a3\n"
                                   "OTEL_EXPORTER_OTLP_HEADERS=x-honeycomb-team=hc-AbC123xyz987\n")
    found = secrets_of(SimpleNamespace(workspace=tmp_path, env={}), {})
    assert "function" not in found and "sk-proj-9f8e7d6c5b4a3" in found and "hc-AbC123xyz987" in found
    trusted = secrets_of(SimpleNamespace(workspace=tmp_path, env={}),
                         {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=plainvalue1,x-other=two22222"})
    assert {"plainvalue1", "two22222"} <= set(trusted)


def test_a_secret_is_found_as_json_spells_it() -> None:
    """Second review: call arguments are JSON text; a quote, a backslash or a non-ASCII letter changes how
    a secret is written there (`Pa\\"ss\\\\wd`, `p\\u00e4ss`), and every path that redacts must find it."""
    import json

    from shou.redact import Redactor

    quote, utf8 = 'Pa"ss\\wd-Split99xyz', "pässwört-Geheim-4242"
    r = Redactor([quote, utf8])
    for text in (json.dumps({"e": f"1 # {quote} {utf8}"}), json.dumps({"e": f"{quote} {utf8}"}, ensure_ascii=False)):
        out = r.text(text)
        assert out.count("[redacted]") == 2 and "Split99xyz" not in out and "Geheim" not in out, out


def test_the_substring_search_for_few_secrets_answers_as_the_expression_does() -> None:
    # A few secrets are looked for one by one, many with one expression: both must find the same things.
    few = Redactor([KEY, "p\u00e4ss-word-42"])
    many = Redactor([KEY, "p\u00e4ss-word-42", *(f"other-secret-{i:04d}" for i in range(10))])
    assert few._texts is not None and many._texts is None
    texts = ["", "plain text", f"x{KEY}y", "p\u00e4ss-word-42", "p\\u00e4ss-word-42", KEY[:-1], "a \\u0041 b",
             '{"k": "sk-live-0123456789abcde"}']
    for r in (few, many):
        for text in texts:
            assert r._holds(text) is (r.pattern is not None and r.pattern.search(text) is not None) if text else True
            data = text.encode()
            assert r.may_hold(data) is (r._json is not None and r._json.search(data) is not None), text
            assert r.text(text) == (r.pattern.sub(REDACTED, text) if r.pattern is not None else text)
    assert few.may_hold(b'"\\u0073k"') and not few.may_hold(b'{"a": 1}')
    assert few.text(f"key {KEY}") == f"key {REDACTED}"


def test_a_key_in_the_base_url_s_path_or_fragment_is_a_secret_as_in_an_mcp_server_s_url() -> None:
    # a gateway's key as a path part (or a fragment) of the model's base URL was stored and printed in the
    # "cannot reach" error; the same in an MCP server's url was masked: one function finds both now
    from types import SimpleNamespace

    from shou.config import shown_url
    from shou.known_secrets import secrets_of
    from shou.redact_servers import server_secrets

    key, frag = "sk-proj-SECRETPATHabcdef1234567890ABCDEF", "SECRETFRAGabc123"
    url = f"http://127.0.0.1:9/v1/{key}/#{frag}"
    for found in (secrets_of(SimpleNamespace(base_url=url), {}), secrets_of(None, {"OPENAI_BASE_URL": url}),
                  secrets_of(SimpleNamespace(alert_webhook=url), {}), server_secrets({"url": url})):
        assert {key, frag} <= set(found)
    assert {key, "Tok%2Fen0123456789abcdef", "Tok/en0123456789abcdef"} <= set(secrets_of(
        SimpleNamespace(base_url=f"https://gw.example/{key}/Tok%2Fen0123456789abcdef/v1"), {}))
    assert shown_url(url) == "http://127.0.0.1:9/v1/***/#***"
    assert Redactor(secrets_of(SimpleNamespace(base_url=url), {})).text(f"cannot reach {url}") == \
        f"cannot reach http://127.0.0.1:9/v1/{REDACTED}/#{REDACTED}"
    # the ordinary parts of a base URL stay: /v1, /openai/deployments/gpt-4o, a project's name
    plain = secrets_of(SimpleNamespace(base_url="https://x.openai.azure.com/openai/deployments/gpt-4o-mini/v1"), {})
    assert not set(plain) & {"openai", "deployments", "gpt-4o-mini"}
    assert shown_url("https://api.openai.com/v1") == "https://api.openai.com/v1"
