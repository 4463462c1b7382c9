"""The request builder: every request valid, within budget, task and newest turn kept; relevance; tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shou.context.builder import ContextBuilder, ContextPolicy, blocks_of, system_text
from shou.context.relevance import bm25_scores, select_tools
from shou.context.tokens import TokenCounter, context_window, get_encoder
from shou.context.validate import InvalidRequest, validate_messages
from shou.messages import ImagePart, Message, TextPart, ToolCall
from shou.tools import Tool

COUNTER = TokenCounter("gpt-4o-mini")


def conversation(draw_blocks: list[tuple[str, int, int]]) -> list[Message]:
    """History from (kind, size, n_calls) triples: user / text / tools blocks of roughly `size` words."""
    out: list[Message] = [Message.user("the task: find the vault code")]
    for i, (kind, size, n) in enumerate(draw_blocks):
        words = " ".join(f"w{i}x{j}" for j in range(size))
        if kind == "user":
            out.append(Message.user(words))
        elif kind == "text":
            out.append(Message.assistant(words))
        else:
            calls = [ToolCall(f"c{i}_{k}", "read_file", f'{{"path": "f{i}_{k}"}}') for k in range(n)]
            out.append(Message.assistant(None, calls))
            out.extend(Message.tool(c.id, c.name, words) for c in calls)
            if kind == "image":
                out.append(Message.user((TextPart("[image]"), ImagePart("QUJD"))))
    return out


blocks = st.lists(st.tuples(st.sampled_from(["user", "text", "tools", "image"]), st.integers(1, 400),
                            st.integers(1, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(blocks, st.integers(1500, 12_000))
def test_every_built_request_is_valid_and_within_budget(spec: list, window: int) -> None:
    history = conversation(spec)
    builder = ContextBuilder(COUNTER, window, ContextPolicy(reserve_output=256))
    built = builder.build(lambda omitted: system_text("be brief", omitted=omitted), history, pinned=0,
                          query="vault code")
    validate_messages(built.messages)
    assert built.messages[0].role == "system"
    assert built.messages[1] == history[0]  # the task is always there
    last_block = blocks_of(history)[-1]
    assert [m.role for m in built.messages[-(last_block[1] - last_block[0]):]] == \
        [m.role for m in history[last_block[0]:]]  # and so is the newest block
    noted = int(built.omitted > 0)  # the note of what is left out follows the task
    assert built.tokens <= builder.budget + 64 or len(built.messages) <= 2 + noted + (last_block[1] - last_block[0])
    if built.omitted:
        assert "older messages are not shown" in built.messages[0].text
        assert built.messages[2].role == "user" and "Not shown in this request" in built.messages[2].text


def test_relevant_old_blocks_come_back_in_order() -> None:
    history = [Message.user("task: what is the vault code?")]
    for i in range(30):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "log{i}.txt"}}')
        body = "the vault code is 7341" if i == 3 else " ".join(f"noise{i}_{j}" for j in range(150))
        history += [Message.assistant(None, [call]), Message.tool(call.id, "read_file", body)]
    builder = ContextBuilder(COUNTER, 3000, ContextPolicy(reserve_output=200))
    built = builder.build(lambda o: system_text("x", omitted=o), history, pinned=0, query="vault code")
    texts = [m.text for m in built.messages]
    assert "the vault code is 7341" in texts and built.omitted > 0
    validate_messages(built.messages)
    ids = [m.tool_call_id for m in built.messages if m.role == "tool"]
    assert ids == sorted(ids, key=lambda x: int(x[1:]))  # chronological


def test_huge_newest_result_is_shrunk_not_dropped() -> None:
    call = ToolCall("c1", "shell", "{}")
    history = [Message.user("go"), Message.assistant(None, [call]), Message.tool("c1", "shell", "y " * 20_000)]
    builder = ContextBuilder(COUNTER, 2000, ContextPolicy(reserve_output=200))
    built = builder.build(lambda o: "sys", history, pinned=0)
    validate_messages(built.messages)
    assert built.messages[-1].role == "tool" and built.tokens < 2500 and "omitted" in built.messages[-1].text


def test_validator_rejects_broken_requests() -> None:
    call = ToolCall("a", "f", "{}")
    with pytest.raises(InvalidRequest, match="answers no open tool call"):
        validate_messages([Message.user("x"), Message.tool("a", "f", "1")])
    with pytest.raises(InvalidRequest, match="never answered"):
        validate_messages([Message.user("x"), Message.assistant(None, [call]), Message.user("y")])
    with pytest.raises(InvalidRequest, match="system message after"):
        validate_messages([Message.user("x"), Message.system("s")])
    with pytest.raises(InvalidRequest, match="unanswered"):
        validate_messages([Message.user("x"), Message.assistant(None, [call])])


def test_encodings_are_built_offline_from_shipped_files(tmp_path, monkeypatch) -> None:
    from shou.context.tokens import load_encoding

    # tiktoken would download into (or read from) its cache; shou's loader touches neither.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # any download attempt would fail
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert load_encoding("o200k_base").encode("hello world") == [24912, 2375]
    assert load_encoding("o200k_base").n_vocab == 200019
    assert not (tmp_path / "cache").exists()


def test_token_counts_are_real_encodings_and_cached() -> None:
    enc = get_encoder("cl100k_base")
    assert enc("hello world") == 2  # tiktoken's cl100k, loaded offline
    m = Message.user("hello world")
    assert COUNTER.message(m) == 4 + enc("hello world") and COUNTER.message(m) == COUNTER._ids[id(m)][1]
    # an equal message made again costs what its text costs, remembered by text; a system message is not kept
    system = Message.system("be brief " * 50)
    assert COUNTER.message(system) == COUNTER.message(Message.system("be brief " * 50)) == 4 + enc("be brief " * 50)
    assert id(system) not in COUNTER._ids and COUNTER._texts["be brief " * 50] == enc("be brief " * 50)
    assert context_window("deepseek:deepseek-chat") == 128_000 and context_window("unknown-model") == 32_768
    assert context_window("gpt-4o", override=9000) == 9000


def test_bm25_and_tool_selection() -> None:
    scores = bm25_scores("vault code", ["the vault code is 7341", "nothing here", "a code review"])
    assert scores[0] > scores[2] > scores[1] == 0
    tools = [Tool(f"tool_{i}", f"does thing number {i}", None, lambda: None) for i in range(30)]
    tools.append(Tool("weather_forecast", "Get the weather forecast for a city", None, lambda: None))
    picked = select_tools(tools, "what is the weather in Paris", max_tools=5, core=["tool_0"])
    assert [t.name for t in picked] == ["tool_0", "weather_forecast"]
    assert len(select_tools(tools, "zzz qqq", max_tools=5)) == 31  # nothing relevant: offer everything
    assert len(select_tools(tools[:4], "weather", max_tools=5)) == 4  # few tools: no selection at all


def test_embeddings_fuse_with_bm25() -> None:
    from shou.context.relevance import rank

    docs = ["the cat sat", "a feline rested on the mat", "stock prices fell"]
    vectors = {"cat": [1.0, 0.0], "the cat sat": [0.9, 0.1], "a feline rested on the mat": [0.95, 0.05],
               "stock prices fell": [0.0, 1.0]}
    scores = rank("cat", docs, lambda texts: [vectors[t] for t in texts])
    assert scores[1] > scores[2]  # no shared word, but close in meaning: lifted by the embedding
    assert rank("cat", docs)[1] == 0  # BM25 alone cannot see it


def test_a_short_system_prompt_is_counted_once_not_at_every_step(monkeypatch) -> None:
    # The system text comes back in every request: encoding it again at each step was most of tiktoken's
    # work in a short task (issue 35). What is counted stays the same.
    from shou import Agent, ScriptedModel, tool
    from shou.context import tokens

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    seen: list[str] = []
    real = get_encoder("cl100k_base")
    monkeypatch.setitem(tokens._encoders, "cl100k_base", lambda text: seen.append(text) or real(text))
    prompt = "You are a calculator. Use the tools."
    calls = [{"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 1}}]} for i in range(3)]
    agent = Agent(ScriptedModel([*calls, {"text": "4"}]), [add], prompt)
    assert agent.run("add things").steps == 4
    system = [t for t in seen if prompt in t]
    assert len(system) == 1, f"the system text was encoded {len(system)} times"


def test_long_texts_are_remembered_apart_from_the_churn_of_short_ones_and_within_a_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Many sessions at once count many short texts: a session's long system text must not be encoded again at
    # every step once 1,024 short ones were counted, and long texts are kept up to a bound in characters.
    from shou.context import tokens
    from shou.context.tokens import TokenCounter

    counter = TokenCounter("gpt-4o-mini")
    encoded: list[int] = []
    real = counter._encode
    counter._encode = lambda text: encoded.append(len(text)) or real(text)  # type: ignore[method-assign]
    system = "Follow the house rules. " * 200
    first = counter.text(system)
    for i in range(3000):
        counter.text(f"short result {i}")
    assert counter.text(system) == first and encoded.count(len(system)) == 1
    monkeypatch.setattr(tokens, "MOST_LONG_CHARS", 30_000)
    for c in "abcd":
        counter.text(c * 10_001)
    assert counter._big_chars <= 30_000 and sum(map(len, counter._big)) == counter._big_chars
