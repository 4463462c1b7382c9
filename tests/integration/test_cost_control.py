"""Cost control end to end: prices, budgets checked before the call, session budgets, cheap summaries,
failure-rate alerts. The scripted model over real HTTP; `shou` as a subprocess where the CLI is the point."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shou import Agent, SQLiteStore, tool
from shou.context.builder import ContextPolicy
from shou.events import Compacted, ModelResponse, Notice
from shou.models.base import ModelSettings
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.observe.alerts import AlertMonitor
from shou.tools.builtin.calc import calculator


def calc(expr: str, prompt: int = 1000, completion: int = 100) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calculator", "arguments": {"expression": expr}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def prices(tmp_path: Path, body: str) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "shou.toml").write_text(body)


# Prompts free, replies $1000 per million: a call's worst case is its reply limit, 300 tokens = $0.30, and
# each scripted call really costs its 100 completion tokens = $0.10.
PRICED = '[models."scripted-test"]\ninput_price = 0.0\noutput_price = 1000.0\n'


def test_max_cost_stops_the_run_before_the_call_that_would_exceed_it(serve, shou, tmp_path: Path) -> None:
    prices(tmp_path, PRICED)
    srv = serve([calc("1+1"), calc("2+2"), calc("3+3"), calc("4+4"), calc("5+5"), {"text": "done"}])
    r = shou("run", "--max-cost", "0.55", "-o", "max_tokens", "300", "--json", "add things", server=srv)
    assert r.returncode == 1, r.stderr
    # After three calls $0.30 is spent; a fourth could cost $0.30 more: $0.60, over $0.55. It is never sent.
    assert len(srv.requests) == 3, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    done = events[-1]
    assert done["type"] == "run_finished" and done["status"] == "budget"
    assert "--max-cost of $0.55" in done["error"] and "spent $0.30" in done["error"]
    assert done["usage"]["cost"] == pytest.approx(0.30) and done["usage"]["cost"] <= 0.55
    assert [b["max_tokens"] for b in srv.requests] == [300, 300, 300]


def test_cost_budget_needs_a_known_price(serve, shou, tmp_path: Path) -> None:
    srv = serve([{"text": "hi"}])
    r = shou("run", "--max-cost", "1", "hello", server=srv)
    assert r.returncode == 1 and len(srv.requests) == 0
    assert '[models."scripted-test"]' in r.stderr, r.stderr


def test_session_budget_counts_every_run_of_the_session(serve, shou, tmp_path: Path) -> None:
    prices(tmp_path, "session_token_budget = 5000\n")  # the CLI's first prompt is about 2,800 tokens
    srv = serve([{"text": "one", "usage": {"prompt_tokens": 3000, "completion_tokens": 100}}, {"text": "two"}])
    first = shou("run", "-s", "budgeted", "first", server=srv)
    assert first.returncode == 0, first.stderr
    second = shou("run", "-s", "budgeted", "second", server=srv)
    assert second.returncode == 1 and "session_token_budget of 5,000" in second.stderr, second.stderr
    assert len(srv.requests) == 1
    other = shou("run", "-s", "fresh", "third", server=srv)  # another session has its own budget
    assert other.returncode == 0 and len(srv.requests) == 2


def test_cost_is_tokens_times_the_configured_price(serve, workspace: Path) -> None:
    from shou.pricing import PriceTable

    srv = serve([calc("6*7", 1234, 56), {"text": "42", "usage": {"prompt_tokens": 1300, "completion_tokens": 7}}])
    store = SQLiteStore.for_workspace(workspace)
    table = PriceTable({"m": {"input_price": 2.0, "output_price": 8.0}})
    agent = Agent(OpenAICompatible("m", base_url=srv.base_url), [calculator], workspace=workspace, store=store,
                  prices=table)
    result = agent.run("6*7?", "s")
    responses = [e for e in store.events("s") if isinstance(e, ModelResponse)]
    assert [e.usage.cost for e in responses] == pytest.approx([(1234 * 2 + 56 * 8) / 1e6, (1300 * 2 + 7 * 8) / 1e6])
    assert result.usage.cost == pytest.approx(sum(e.usage.cost or 0 for e in responses))
    store.close()


def test_a_model_without_a_price_has_an_unknown_cost_not_zero(serve, workspace: Path) -> None:
    srv = serve([{"text": "hi", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}])
    result = Agent(OpenAICompatible("no-such-price", base_url=srv.base_url), [], workspace=workspace).run("x")
    assert result.status == "completed" and result.usage.total_tokens == 12 and result.usage.cost is None


@tool
def fetch_log(n: int) -> str:
    """Fetch log number n."""
    return f"log {n}: " + " ".join(f"word{(n * 31 + i) % 97}" for i in range(300))


def test_compaction_summaries_go_to_the_summary_model(serve, workspace: Path) -> None:
    turns = [{"text": f"Reading log {i}.", "tool_calls": [{"name": "fetch_log", "arguments": {"n": i}}]}
             for i in range(14)]
    main = serve([*turns, {"text": "read them all"}])
    cheap = serve([{"summary": True, "text": "Summary: logs 0-9 read."} for _ in range(20)])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(OpenAICompatible("big", base_url=main.base_url), [fetch_log], max_steps=20, workspace=workspace,
                  store=store, context=ContextPolicy(window=6000, reserve_output=500),
                  summary_model=OpenAICompatible("cheap", base_url=cheap.base_url))
    result = agent.run("Read logs 0 to 13.", "s")
    assert result.status == "completed", result.error
    assert cheap.requests and all("[shou:compact]" in str(r["messages"][0]["content"]) for r in cheap.requests)
    assert not any("[shou:compact]" in str(r["messages"][0]["content"]) for r in main.requests)
    compacted = [e for e in store.events("s") if isinstance(e, Compacted)]
    assert compacted and all(e.model == "cheap" and e.usage.requests >= 1 for e in compacted)
    store.close()


def _compacting_agent(main, cheap, workspace: Path, store: SQLiteStore, **kw: Any) -> Agent:
    from shou.pricing import PriceTable

    table = PriceTable({"big": {"input_price": 0.0, "output_price": 1.0},
                        "cheap": {"input_price": 0.0, "output_price": 1000.0}})
    return Agent(OpenAICompatible("big", base_url=main.base_url), [fetch_log], max_steps=20, workspace=workspace,
                 store=store, context=ContextPolicy(window=6000, reserve_output=500), prices=table,
                 summary_model=OpenAICompatible("cheap", base_url=cheap.base_url), **kw)


def test_a_summary_call_is_budgeted_limited_and_traced_like_any_model_call(serve, workspace: Path) -> None:
    """A compaction summary is a model call: checked against the budget before it is sent, with a reply limit,
    its tokens estimated when the provider reports none, its request in the trace, counted once."""
    from shou.trace import resolve, traces

    turns = [{"text": f"Reading log {i}.", "tool_calls": [{"name": "fetch_log", "arguments": {"n": i}}]}
             for i in range(14)]
    main = serve([*turns, {"text": "read them all"}])
    # the summariser writes ~600 tokens and says nothing of what it used
    cheap = serve([{"summary": True, "text": "Summary: " + "logs read. " * 200, "no_usage": True}
                   for _ in range(20)])
    store = SQLiteStore.for_workspace(workspace)
    result = _compacting_agent(main, cheap, workspace, store).run("Read logs 0 to 13.", "s")
    assert result.status == "completed", result.error
    assert cheap.requests and all(0 < r["max_tokens"] <= 4096 for r in cheap.requests)
    runs = traces(store, "s")
    summaries = [c for r in runs for c in r.model_calls if c.purpose == "summary"]
    assert len(summaries) == len(cheap.requests)
    resolve(store, summaries)
    assert all("[shou:compact]" in str(c.messages[0]["content"]) for c in summaries)  # the request as sent
    assert all(c.usage is not None and c.usage.estimated and c.usage.output_tokens > 100 for c in summaries)
    summary_cost = sum(c.usage.cost for c in summaries)
    assert summary_cost > 0.1  # ~600 estimated tokens at $1000 per million each: not $0
    compacted = [e for e in store.events("s") if isinstance(e, Compacted)]
    assert compacted and {i for e in compacted for i in e.calls} == {c.id for c in summaries}
    # counted once: the run's total is its own calls plus the summaries, not the summaries twice
    main_cost = sum(c.usage.cost for r in runs for c in r.model_calls if c.purpose != "summary")
    assert result.usage.cost == pytest.approx(main_cost + summary_cost)
    store.close()
    with SQLiteStore.for_workspace(workspace) as again:  # the session's spending, as a budget sees it
        assert agent_session_spent(again, "s").cost == pytest.approx(result.usage.cost)


def agent_session_spent(store: SQLiteStore, name: str) -> Any:
    from shou.session import Session

    return Session(name, store).spent


def test_max_cost_is_kept_when_compaction_would_break_it(serve, workspace: Path) -> None:
    """A summary at $1000 per million output tokens could reply with at most 200 tokens under a $0.20 budget:
    too little to be worth asking (256), so it is not asked for, and the run stays within its budget."""
    turns = [{"text": f"Reading log {i}.", "tool_calls": [{"name": "fetch_log", "arguments": {"n": i}}]}
             for i in range(14)]
    main = serve([*turns, {"text": "read them all"}])
    cheap = serve([{"summary": True, "text": "Summary.", "usage": {"prompt_tokens": 10, "completion_tokens": 4000}}
                   for _ in range(20)])
    store = SQLiteStore.for_workspace(workspace)
    result = _compacting_agent(main, cheap, workspace, store, max_cost=0.2).run("Read logs 0 to 13.", "s")
    assert cheap.requests == []
    assert result.usage.cost is not None and result.usage.cost <= 0.2
    notices = [e.text for e in store.events("s") if isinstance(e, Notice) and e.kind == "compaction"]
    assert notices and "not compacted" in notices[0] and "--max-cost" in notices[0]
    store.close()


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook():
    handler = type("Hook", (_Hook,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts", handler.received
    server.shutdown()
    server.server_close()


def _wait_for(received: list, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not received and time.monotonic() < deadline:
        time.sleep(0.02)


def test_failure_rate_alert_fires_a_notice_a_stderr_line_and_the_webhook(serve, workspace: Path, webhook) -> None:
    url, received = webhook
    errors = [{"error": 500, "retry_after": 0} for _ in range(4)]
    srv = serve([*errors, {"text": "recovered"}])
    stderr = io.StringIO()
    monitor = AlertMonitor(window=4, threshold=0.5, webhook=url, stderr=stderr)
    store = SQLiteStore.for_workspace(workspace)
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=6, base=0.01))
    result = Agent(model, [], workspace=workspace, store=store, observers=[monitor]).run("hi", "s")
    assert result.status == "completed"
    alerts = [e for e in store.events("s") if isinstance(e, Notice) and e.kind == "alert"]
    assert len(alerts) == 1 and "model calls failed" in alerts[0].text  # once, not on every failure after
    assert "shou alert:" in stderr.getvalue()
    _wait_for(received)
    assert received and received[0]["kind"] == "model" and received[0]["failed"] >= 2
    store.close()


def test_no_alert_while_calls_succeed(serve, workspace: Path) -> None:
    srv = serve([calc("1"), calc("2"), {"text": "ok"}])
    stderr = io.StringIO()
    monitor = AlertMonitor(window=4, threshold=0.5, stderr=stderr)
    result = Agent(OpenAICompatible("m", base_url=srv.base_url), [calculator], workspace=workspace,
                   observers=[monitor]).run("x")
    assert result.status == "completed" and not monitor.fired and stderr.getvalue() == ""


def test_cli_alert_line_on_stderr(serve, shou, tmp_path: Path) -> None:
    prices(tmp_path, "alert_window = 3\n")
    srv = serve([*[{"error": 503, "retry_after": 0} for _ in range(3)], {"text": "ok"}])
    r = shou("run", "hi", server=srv)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("shou alert:") == 1 and "model calls failed" in r.stderr


def test_cache_setting_answers_a_repeated_run_without_a_provider_request(serve, shou, tmp_path: Path) -> None:
    prices(tmp_path, "cache = true\n" + PRICED)
    srv = serve([calc("6*7"), {"text": "42", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}])
    first = shou("run", "--json", "6*7?", server=srv)
    assert first.returncode == 0, first.stderr
    assert len(srv.requests) == 2
    second = shou("run", "--json", "6*7?", server=srv)  # a new session, the same requests
    assert second.returncode == 0, second.stderr
    assert len(srv.requests) == 2  # no provider request at all
    kinds = [json.loads(line)["type"] for line in second.stdout.splitlines() if line.startswith("{")]
    assert kinds == [json.loads(line)["type"] for line in first.stdout.splitlines() if line.startswith("{")]
    responses = [json.loads(line) for line in second.stdout.splitlines() if '"model_response"' in line]
    assert all(r["cached"] and r["usage"]["cost"] == 0 for r in responses)
    assert "42" in second.stdout


def test_fallback_model_answers_when_the_first_keeps_returning_500(serve, shou, tmp_path: Path) -> None:
    prices(tmp_path, 'fallback_models = ["openai:backup"]\nmodel_retries = 1\n')
    failing = serve([{"error": 500, "retry_after": 0} for _ in range(10)])
    backup = serve([{"text": "from the backup"}])
    r = shou("run", "hi", server=failing, OPENAI_BASE_URL=backup.base_url, OPENAI_API_KEY="k")
    assert r.returncode == 0, r.stderr
    assert "from the backup" in r.stdout and "trying openai:backup" in r.stderr
    assert len(failing.requests) == 2 and backup.requests[0]["model"] == "backup"


def test_rate_limit_settings_share_one_limiter_per_provider(tmp_path: Path) -> None:
    from shou.config import load_settings
    from shou.models import build_model

    env = {"SHOU_CONFIG_DIR": str(tmp_path), "SHOU_WORKSPACE": str(tmp_path), "SHOU_BASE_URL": "http://x.test/v1",
           "SHOU_MODEL": "m", "SHOU_RPM": "12", "SHOU_TPM": "9000"}
    one, two = build_model(load_settings(env=env)), build_model(load_settings(env=env))
    assert one.limiter is not None and one.limiter is two.limiter  # every run of the process shares it
    assert (one.limiter.rpm, one.limiter.tpm) == (12, 9000)
    other = build_model(load_settings(env={**env, "SHOU_BASE_URL": "http://y.test/v1"}))
    assert other.limiter is not one.limiter


def test_the_cache_lives_with_the_user_not_in_a_cloned_workspace(serve, shou, tmp_path: Path, workspace: Path) -> None:
    """A repository could ship a cache that answers with the tool calls it likes: the workspace's files are
    never the cache, and the user's cache file is readable by the user alone."""
    prices(tmp_path, "cache = true\n")
    srv = serve([{"text": "fresh"}, {"text": "fresh"}])
    (workspace / ".shou").mkdir(exist_ok=True)
    (workspace / ".shou" / "cache.db").write_text("planted")
    r = shou("run", "hi", server=srv)
    assert r.returncode == 0 and "fresh" in r.stdout and len(srv.requests) == 1, r.stderr
    cache = tmp_path / ".cache" / "shou" / "responses.db"  # HOME is tmp_path in these tests
    assert cache.exists() and (cache.stat().st_mode & 0o077) == 0
    assert (workspace / ".shou" / "cache.db").read_text() == "planted"


def test_known_secrets_are_not_stored_in_the_trace(serve, shou, tmp_path: Path, workspace: Path) -> None:
    secret = "sk-live-abcdefghijklmnop1234"
    (workspace / ".shou").mkdir(exist_ok=True)
    (workspace / ".shou" / "AGENTS.md").write_text(f"Deploy key is {secret}, use it.")
    assert shou("trust", "--yes").returncode == 0  # the model reads AGENTS.md only once it is trusted
    srv = serve([{"text": "ok"}])
    r = shou("run", "hi", server=srv, OPENAI_API_KEY=secret)
    assert r.returncode == 0, r.stderr
    store = SQLiteStore.for_workspace(workspace)
    logged = "".join(data for (data,) in store._db.execute("SELECT data FROM events"))
    assert '"contents":' in logged and secret not in logged
    assert secret not in json.dumps(srv.requests) and "Deploy key is" in json.dumps(srv.requests)  # nor sent
    store.close()


@pytest.mark.parametrize("reported", [{"prompt_tokens": -1_000_000, "completion_tokens": 50},
                                      {"prompt_tokens": "lots", "completion_tokens": 50},
                                      {"prompt_tokens": [1], "completion_tokens": 50}])
def test_a_provider_cannot_lower_what_a_budget_sees_by_garbled_counts(serve, workspace: Path, reported) -> None:
    from shou.pricing import PriceTable

    body = {"id": "x", "object": "chat.completion", "model": "m", "usage": reported,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    srv = serve([{"raw_body": json.dumps(body), "content_type": "application/json"}])  # whatever the provider says
    table = PriceTable({"m": {"input_price": 1.0, "output_price": 1.0}})
    result = Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace, prices=table,
                   max_cost=1.0).run("hi")
    assert result.status == "completed", result.error  # not a crash of the run
    assert result.usage.input_tokens > 0 and result.usage.estimated  # shou's own count stands in
    assert result.usage.cost is not None and result.usage.cost > 0


def test_summary_model_setting_names_a_model_of_the_same_endpoint_or_another_provider(tmp_path: Path) -> None:
    from shou.config import load_settings
    from shou.models import build_model

    env = {"SHOU_CONFIG_DIR": str(tmp_path), "SHOU_WORKSPACE": str(tmp_path), "SHOU_BASE_URL": "http://x.test/v1",
           "SHOU_MODEL": "big", "SHOU_SUMMARY_MODEL": "cheap", "DEEPSEEK_API_KEY": "k" * 12}
    settings = load_settings(env=env)
    agent = Agent(build_model(settings), [], settings=settings, summary_model=settings.summary_model,
                  workspace=tmp_path)
    assert (agent.summary_model.model, agent.summary_model.base_url) == ("cheap", "http://x.test/v1")
    settings = load_settings(env={**env, "SHOU_SUMMARY_MODEL": "deepseek:deepseek-chat"})
    agent = Agent(build_model(settings), [], settings=settings, summary_model=settings.summary_model,
                  workspace=tmp_path)
    assert (agent.summary_model.model, agent.summary_model.provider) == ("deepseek-chat", "deepseek")
    assert agent.summary_model.base_url == "https://api.deepseek.com/v1"


LONG = " ".join(f"word{i}" for i in range(3000))  # ~6,000 tokens of reply


def _cut(after: int = 14_000) -> dict[str, Any]:
    return {"text": LONG, "chunk_size": 400, "cut_after": after}


def test_a_failed_attempt_that_streamed_is_billed_and_counted(serve, workspace: Path) -> None:
    """A reply cut off mid-stream is retried; the cut attempt was billed by the provider, so its prompt and
    what it streamed count (estimated) in the run, the trace and the usage report."""
    from shou.trace import traces
    from shou.usage_report import usage_report, usage_total

    srv = serve([_cut(), _cut(), {"text": "done", "usage": {"prompt_tokens": 50, "completion_tokens": 5}}])
    store = SQLiteStore.for_workspace(workspace)
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=3, base=0.01))
    result = Agent(model, [], workspace=workspace, store=store).run("hi", "s")
    assert result.status == "completed" and len(srv.requests) == 3, result.error
    assert result.usage.output_tokens > 2 * 1000 and result.usage.estimated  # two cut attempts of ~2,500 each
    call = traces(store, "s")[0].model_calls[0]
    assert call.usage is not None and call.usage.output_tokens == 5  # the answer itself, as reported
    assert call.void_usage is not None and call.void_usage.output_tokens == result.usage.output_tokens - 5
    assert all("the failed attempt used about" in note for note in call.notes)
    assert usage_total(usage_report(store)).output_tokens == result.usage.output_tokens
    store.close()


def test_a_budget_stops_retrying_when_a_failed_attempt_leaves_no_room(serve, workspace: Path) -> None:
    srv = serve([_cut(), _cut(), {"text": "done"}])
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=8, base=0.01))
    # a 6,000-token budget holds one attempt's worst case (prompt + 4,096); after a cut attempt that streamed
    # ~2,500 tokens, another does not fit
    result = Agent(model, [], workspace=workspace, token_budget=6000).run("hi")
    assert result.status == "budget" and "failed attempt" in (result.error or ""), result.error
    assert len(srv.requests) == 1
    assert 2000 < result.usage.total_tokens <= 6000


def test_a_reply_whose_output_count_is_missing_or_garbled_is_estimated(serve, workspace: Path) -> None:
    for reported in ({"prompt_tokens": 100}, {"prompt_tokens": 100, "completion_tokens": -5}):
        body = {"id": "x", "object": "chat.completion", "model": "m", "usage": reported,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": LONG},
                             "finish_reason": "stop"}]}
        srv = serve([{"raw_body": json.dumps(body), "content_type": "application/json"}])
        result = Agent(OpenAICompatible("m", base_url=srv.base_url), [], workspace=workspace).run("hi")
        assert result.status == "completed", result.error
        assert result.usage.input_tokens == 100 and result.usage.output_tokens > 3000 and result.usage.estimated


def test_a_model_call_that_fails_without_a_retry_counts_toward_the_alert(serve, workspace: Path) -> None:
    srv = serve([{"error": 500} for _ in range(10)])
    monitor = AlertMonitor(window=4, threshold=0.5, stderr=io.StringIO())
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=0))
    agent = Agent(model, [], workspace=workspace, observers=[monitor])
    for _ in range(4):
        assert agent.run("hi").status == "error"
    assert len(monitor.fired) == 1 and monitor.fired[0]["kind"] == "model"


def test_a_login_in_the_base_url_is_a_secret_like_a_key(serve, shou, tmp_path: Path, workspace: Path) -> None:
    """`user:password@` in the base URL is sent as basic auth: the password, the pair and the header value
    never reach the log or `shou trace --json`, whoever echoes them (a provider, the model, a tool)."""
    import base64

    password = "pa55-Hunter2-SECRET"
    basic = base64.b64encode(f"bob:{password}".encode()).decode()
    srv = serve([{"text": f"I saw {password} and Basic {basic} and bob:{password}"}])
    url = srv.base_url.replace("http://", f"http://bob:{password}@")
    r = shou("run", "hi", server=srv, SHOU_BASE_URL=url)
    assert r.returncode == 0, r.stderr
    store = SQLiteStore.for_workspace(workspace)
    logged = "".join(data for (data,) in store._db.execute("SELECT data FROM events"))
    store.close()
    trace = shou("trace", "--json")
    assert "I saw [redacted]" in logged and "I saw [redacted]" in trace.stdout
    for text in (logged, trace.stdout):
        assert password not in text and basic not in text and "Hunter2" not in text


def test_the_last_failed_attempt_counts_too(serve, workspace: Path) -> None:
    """No retry is left (retries 0): the cut attempt that streamed ~2,500 tokens was billed all the same, so it
    counts in the run, the session and the trace, on the `model_error` notice."""
    from shou.session import Session
    from shou.trace import traces

    srv = serve([_cut()])
    store = SQLiteStore.for_workspace(workspace)
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=0))
    result = Agent(model, [], workspace=workspace, store=store).run("hi", "s")
    assert result.status == "error" and len(srv.requests) == 1
    assert result.usage.output_tokens > 1000 and result.usage.estimated
    assert Session("s", store).spent.output_tokens == result.usage.output_tokens
    call = traces(store, "s")[0].model_calls[0]
    assert call.void_usage is not None and call.void_usage.output_tokens == result.usage.output_tokens
    store.close()


def test_a_failed_attempt_counts_at_most_its_reply_limit(serve, workspace: Path) -> None:
    srv = serve([_cut(), {"text": "done", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}])
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=1, base=0.01))
    result = Agent(model, [], workspace=workspace, model_settings=ModelSettings(max_tokens=300)).run("hi")
    assert result.status == "completed" and srv.requests[0]["max_tokens"] == 300
    assert result.usage.output_tokens == 300 + 1  # the cut attempt streamed ~2,500: no provider bills past 300


def test_streamed_reasoning_of_a_failed_attempt_counts(serve, workspace: Path) -> None:
    """DeepSeek-style `reasoning_content` is output the provider bills, though no one sees it."""
    thought = " ".join(f"step{i}" for i in range(400))
    chunks = [{"id": "x", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {"reasoning_content": thought[i:i + 200]}}]}
              for i in range(0, len(thought), 200)]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)  # then the stream just ends: a cut reply
    srv = serve([{"raw_body": body, "content_type": "text/event-stream"}])
    model = OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=0))
    result = Agent(model, [], workspace=workspace).run("think")
    assert result.status == "error"
    assert result.usage.output_tokens > 500 and result.usage.estimated


def test_a_planted_negative_usage_in_the_log_cannot_lift_a_session_budget(serve, shou, tmp_path: Path,
                                                                          workspace: Path) -> None:
    prices(tmp_path, "session_token_budget = 5000\n")
    srv = serve([{"text": "one", "usage": {"prompt_tokens": 3000, "completion_tokens": 100}}, {"text": "two"}])
    first = shou("run", "-s", "s", "first", server=srv)
    assert first.returncode == 0, first.stderr
    store = SQLiteStore.for_workspace(workspace)
    planted = {"type": "notice", "run_id": "run_x", "step": 1, "kind": "retry", "text": "planted",
               "usage": {"input_tokens": -1_000_000_000, "output_tokens": 0, "requests": 0, "cost": -1000.0}}
    store._db.execute("INSERT INTO events (session, run_id, type, ts, data) VALUES ('s', 'run_x', 'notice', 0, ?)",
                      (json.dumps(planted),))
    store.close()
    second = shou("run", "-s", "s", "second", server=srv)
    assert second.returncode == 1 and "session_token_budget of 5,000" in second.stderr, second.stderr
    assert len(srv.requests) == 1


def test_a_repeated_run_under_a_budget_is_answered_from_the_cache_too(serve, shou, tmp_path: Path) -> None:
    """A budget lowers each request's max_tokens to what is left, which differs once the cache answers for
    free: the reply limit is not part of the key, and a stored reply answers when it fits the limit."""
    prices(tmp_path, "cache = true\n" + PRICED)
    srv = serve([calc("6*7", 10, 20), {"text": "42", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}])
    first = shou("run", "--max-cost", "2", "6*7?", server=srv)
    assert first.returncode == 0 and len(srv.requests) == 2, first.stderr
    assert srv.requests[0]["max_tokens"] != srv.requests[1]["max_tokens"]  # the budget left shrank
    second = shou("run", "--max-cost", "2", "6*7?", server=srv)
    assert second.returncode == 0 and "42" in second.stdout, second.stderr
    assert len(srv.requests) == 2  # no provider request at all


async def test_a_stored_reply_longer_than_the_requests_limit_is_a_miss(serve, tmp_path: Path) -> None:
    from shou.messages import Message
    from shou.models.cache import CachedModel, ResponseCache

    srv = serve([{"text": "a long answer", "usage": {"prompt_tokens": 5, "completion_tokens": 300}},
                 {"text": "short", "finish_reason": "length", "usage": {"prompt_tokens": 5, "completion_tokens": 100}}])
    model = CachedModel(OpenAICompatible("m", base_url=srv.base_url), ResponseCache(tmp_path / "c.db"))
    ask = [Message.user("hi")]
    for limit, requests in ((400, 1), (300, 1), (100, 2)):
        _ = [e async for e in model.stream(ask, [], ModelSettings(max_tokens=limit))]
        assert len(srv.requests) == requests, limit  # 300 tokens fit 400 and 300; not 100
    await model.aclose()


def test_an_alert_webhook_is_delivered_though_the_run_ends_at_once(serve, shou, tmp_path: Path, webhook) -> None:
    url, received = webhook
    prices(tmp_path, f'alert_webhook = "{url}"\nalert_window = 4\nalert_threshold = 0.5\n')
    reads = [{"tool_calls": [{"name": "read_file", "arguments": {"path": f"missing{i}.txt"}}]} for i in range(5)]
    srv = serve([*reads, {"text": "gave up"}])
    r = shou("run", "read them", server=srv)
    assert r.returncode == 0 and "shou alert:" in r.stderr, r.stderr
    assert received and received[0]["kind"] == "tool"  # the process waited for the post before it exited


def test_the_alert_window_spans_runs_of_the_workspace(serve, shou, tmp_path: Path) -> None:
    """Each `shou run` is a new process; "the last 4 calls" are the workspace's, not only this process's."""
    prices(tmp_path, "alert_window = 4\nalert_threshold = 0.5\n")
    fail = {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.txt"}}]}
    srv = serve([fail, fail, {"text": "no"}, fail, fail, {"text": "no"}, fail, fail, {"text": "no"}])
    first = shou("run", "-s", "a", "read", server=srv)
    assert first.returncode == 0 and "shou alert:" not in first.stderr  # 2 calls: too few to judge
    second = shou("run", "-s", "b", "read", server=srv)
    assert "shou alert:" in second.stderr and "4 of the last 4 tool calls failed" in second.stderr, second.stderr
    third = shou("run", "-s", "c", "read", server=srv)
    assert "shou alert:" not in third.stderr  # it fired already and the share never dropped: not again
