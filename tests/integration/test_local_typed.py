"""A typed answer from the bundled offline model: the answer is written under a grammar made from its schema
(llama.cpp, real weights), so even a 135M model's answer parses and validates."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from shou import Agent
from shou.events import ModelRequest, RunFinished, TextDelta
from shou.models.capabilities import output_mode
from shou.models.local import LocalModel, local_available

from ..fixtures.needs import need

need(*local_available())


class Capital(BaseModel):
    city: str = Field(max_length=40)
    country: str = Field(max_length=40)


async def test_the_local_model_answers_under_a_grammar_and_the_answer_is_typed(workspace: Path) -> None:
    model = LocalModel(seed=0, max_tokens=64)
    assert output_mode(model) == "grammar"
    agent = Agent(model, [], workspace=workspace, output_type=Capital, output_retries=0)
    events = [e async for e in agent.stream("What is the capital of France? Name the city and its country.")]
    done = events[-1]
    assert isinstance(done, RunFinished) and done.status == "completed", (done.error, done.answer)
    value = Capital.model_validate_json(done.answer)  # parses and validates: no retry was allowed
    assert value.city and value.country
    # the schema went with the request as a response_format, and the answer came whole from the grammar's
    # generation (one piece), not streamed token by token as a free answer is
    request = next(e for e in events if isinstance(e, ModelRequest))
    fmt = (request.params or {}).get("response_format")
    assert fmt is not None and fmt["json_schema"]["schema"] == Capital.model_json_schema()
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(pieces) == 1 and json.loads(pieces[0]) == json.loads(done.answer)
    free = [e async for e in Agent(LocalModel(seed=0, max_tokens=24), [], workspace=workspace).stream("Say hi.")]
    assert sum(isinstance(e, TextDelta) for e in free) > 1  # the contrast: a free answer streams
