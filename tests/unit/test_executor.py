"""The executor: repair, validation, unknown tools, timeouts (async, sync, subprocess trees), concurrency."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shou.errors import ToolError
from shou.messages import ToolCall
from shou.tools import ToolContext, ToolSet, tool
from shou.tools.executor import ToolExecutor, parse_arguments

from ..fixtures.procs import gone_within


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(timeout=0.3)
async def hang_async() -> str:
    """Never returns."""
    await asyncio.sleep(3600)
    return "unreachable"


@tool(timeout=0.3)
def hang_sync() -> str:
    """Blocks its thread for a while."""
    time.sleep(2)
    return "late"


@tool(timeout=0.5)
async def spawn_tree(ctx: ToolContext) -> str:
    """Starts a shell that starts a long sleep in the background, then waits."""
    await ctx.run_process("sh", "-c", f"sleep 300 & echo $! > {ctx.workspace}/child.pid; wait")
    return "done"


@tool
def boom() -> str:
    """Raises."""
    raise KeyError("missing")


@tool
def polite_failure() -> str:
    """Raises a ToolError."""
    raise ToolError("the file is locked; try again later")


@tool
def big() -> str:
    """Huge output."""
    return "\n".join(f"line {i}" for i in range(100_000))


TOOLS = ToolSet([add, hang_async, hang_sync, spawn_tree, boom, polite_failure, big])


def call(name: str, args: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id, name, args)


@pytest.fixture
def ex() -> ToolExecutor:
    return ToolExecutor(TOOLS, timeout=5)


async def test_valid_call(ex: ToolExecutor) -> None:
    r = await ex.execute(call("add", '{"a": 2, "b": 3}'), None)
    assert (r.content, r.is_error) == ("5", False)


async def test_unknown_tool_lists_valid_names(ex: ToolExecutor) -> None:
    r = await ex.execute(call("subtract", '{"a": 1}'), None)
    assert r.is_error
    assert "no tool named 'subtract'" in r.content
    assert "add, hang_async, hang_sync" in r.content


async def test_repaired_json_is_used(ex: ToolExecutor) -> None:
    r = await ex.execute(call("add", "{'a': 2, 'b': 40"), None)
    assert (r.content, r.is_error) == ("42", False)


async def test_unrepairable_json_explains(ex: ToolExecutor) -> None:
    r = await ex.execute(call("add", "add two and three please"), None)
    assert r.is_error
    assert "not valid JSON" in r.content and "JSON object" in r.content


async def test_schema_violation_is_precise(ex: ToolExecutor) -> None:
    r = await ex.execute(call("add", '{"a": "two"}'), None)
    assert r.is_error
    assert "a: Input should be a valid integer" in r.content
    assert "b: Field required" in r.content


async def test_exceptions_become_error_results(ex: ToolExecutor) -> None:
    r = await ex.execute(call("boom"), None)
    assert r.is_error and "KeyError" in r.content
    r = await ex.execute(call("polite_failure"), None)
    assert r.content == "Error: the file is locked; try again later"


async def test_async_tool_times_out_and_is_cancelled(ex: ToolExecutor) -> None:
    t0 = time.perf_counter()
    r = await ex.execute(call("hang_async"), None)
    assert r.is_error and "did not finish within 0.3 s" in r.content
    assert time.perf_counter() - t0 < 30  # the tool sleeps an hour: only the 0.3 s timeout ends it this soon


async def test_sync_tool_times_out_without_blocking_the_loop(ex: ToolExecutor) -> None:
    r = await ex.execute(call("hang_sync"), None)
    assert r.is_error and "0.3 s" in r.content


async def test_subprocess_tree_is_killed_on_timeout(ex: ToolExecutor, tmp_path: Path) -> None:
    r = await ex.execute(call("spawn_tree"), ToolContext(tmp_path))
    assert r.is_error and "did not finish" in r.content
    pid = int((tmp_path / "child.pid").read_text())
    assert gone_within(pid), f"grandchild {pid} survived the timeout"


async def test_huge_output_is_truncated_with_a_note(ex: ToolExecutor) -> None:
    r = await ex.execute(call("big"), None)
    assert len(r.content.encode()) < 60_000
    assert r.content.startswith("line 0\n") and r.content.rstrip().endswith("line 99999")
    assert "lines" in r.content and "omitted" in r.content


async def test_calls_run_concurrently_and_keep_their_index() -> None:
    log: list[tuple[str, str, float]] = []

    @tool
    async def nap(tag: str, seconds: float) -> str:
        """Sleep."""
        log.append((tag, "start", time.perf_counter()))
        await asyncio.sleep(seconds)
        log.append((tag, "end", time.perf_counter()))
        return tag

    ex = ToolExecutor(ToolSet([nap]), concurrency=4)
    calls = [call("nap", '{"tag": "slow", "seconds": 0.4}', "a"), call("nap", '{"tag": "fast", "seconds": 0.1}', "b")]
    done = [d async for d in ex.run_all(calls, None)]
    assert [d.result.content for d in done] == ["fast", "slow"]  # finished out of order ...
    assert [d.index for d in done] == [1, 0]  # ... but each knows its place in the turn
    starts = {tag: t for tag, what, t in log if what == "start"}
    ends = {tag: t for tag, what, t in log if what == "end"}
    assert starts["fast"] < ends["slow"]  # overlap in time


async def test_concurrency_limit_is_respected() -> None:
    running = 0
    peak = 0

    @tool
    async def work() -> str:
        """Work."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return "ok"

    ex = ToolExecutor(ToolSet([work]), concurrency=2)
    done = [d async for d in ex.run_all([call("work", "{}", str(i)) for i in range(6)], None)]
    assert len(done) == 6 and peak == 2


@given(st.text(max_size=200))
def test_parse_arguments_never_raises(raw: str) -> None:
    args, problem = parse_arguments(raw)
    assert (args is None) != (problem is None)
    assert args is None or isinstance(args, dict)


async def test_big_output_spills_to_the_workspace(tmp_path: Path) -> None:
    ex = ToolExecutor(TOOLS, spill_chars=2000)
    r = await ex.execute(ToolCall("c9", "big", "{}"), ToolContext(tmp_path))
    [saved] = (tmp_path / ".shou" / "outputs").glob("big-*.txt")
    assert saved.read_text().count("\n") == 99_999  # the whole output, on disk
    assert len(r.content) < 3000 and "line 0" in r.content and "line 99999" in r.content
    assert f".shou/outputs/{saved.name}" in r.content and "read_file" in r.content


@pytest.mark.parametrize("call_id", ["../../../../tmp/owned", "/etc/cron.d/x", "a/../../b", "..", "c\0d", "é/\\x"])
async def test_call_ids_never_become_paths(tmp_path: Path, call_id: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ex = ToolExecutor(TOOLS, spill_chars=2000)
    r = await ex.execute(ToolCall(call_id, "big", "{}"), ToolContext(ws))
    [saved] = (ws / ".shou" / "outputs").iterdir()  # the one file, inside the workspace
    assert saved.name.startswith("big-") and saved.read_text().count("\n") == 99_999
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]  # nothing written next to the workspace
    assert f".shou/outputs/{saved.name}" in r.content


def test_arguments_nested_past_the_parser_s_limit_are_refused_not_raised() -> None:
    # json.loads raises RecursionError (no ValueError) past its depth: it ended the run as an internal error
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert parse_arguments(deep) == (None, "the arguments nest too deep to read; send them as one flat JSON object")
    escaped = '{"a": ' + "[" * 900 + '"\\udcff"' + "]" * 900 + "}"  # parsed, then too deep to look through
    assert parse_arguments(escaped)[0] is None
