"""Typed answers (structured output): a run whose final answer must be JSON of a given type or schema.

`AgentConfig(output_type=...)` takes a Python type (a pydantic model, a dataclass, a TypedDict, a list of
them, a union: anything pydantic's `TypeAdapter` takes) or a raw JSON schema (`JsonSchema(dict)`, what
`--output-schema FILE.json` and the API's `output_schema` give, checked with `jsonschema`). How the model is
held to the schema depends on what it can do (`models.capabilities.output_mode`):

- `response_format`: the provider's structured-output mode; every step's request carries
  `response_format: {"type": "json_schema", ...}` and the final answer is the reply's text.
- `grammar`: the local model gets the same setting and writes its answer under a grammar made from it.
- `tool`: a `final_answer` tool whose parameters are the schema is offered on every step with
  `tool_choice: required`; the answer is the arguments of the call that ends the run.

A schema whose root is not an object (a list, a union, a number) is wrapped as `{"answer": ...}` on the wire,
as providers want an object there, and unwrapped before it is checked. An answer that does not validate goes
back to the model with the errors; after `output_retries` such retries the run ends `invalid_output` with
the last attempt as its answer. A valid answer is recorded as its JSON text (`RunFinished.answer`), from which
`RunResult.output` is the typed value again: what survives a restart is the event, not a Python object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..events import Feedback, ToolCallFinished
from ..messages import Message
from ..models.base import ModelSettings
from ..models.capabilities import OutputMode, output_mode
from .turn import must_call

if TYPE_CHECKING:
    from .loop import Ending, Run

__all__ = ["ANSWER_TOOL", "JsonSchema", "OutputCheck", "OutputSpec", "attach_output", "output_spec"]

ANSWER_TOOL = "final_answer"
TOO_DEEP = "the answer nests too deeply to check against the schema; give a flatter JSON value"
WRAP_KEY = "answer"
ERROR_CHARS = 2000  # of the validation errors sent back to the model
INVALID = ("[shou] Your final answer does not match the required JSON schema:\n{errors}\n\nAnswer again with "
           "JSON that matches the schema{how}.")
CALL_IT = (f"[shou] This task needs its final answer as a call of the `{ANSWER_TOOL}` tool, whose arguments are "
           "the answer; plain text is not taken.")
NOT_RUN = f"Error: not run: `{ANSWER_TOOL}` ends the run; call other tools in a step of their own, before it."
RECEIVED = "Answer received."
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """A raw JSON schema as a run's output type (validated with `jsonschema`, the value a plain JSON value)."""

    schema: dict[str, Any]
    name: str = "answer"


@dataclass(frozen=True, slots=True, eq=False)
class OutputSpec:
    """What a typed answer must be: its `schema`, a `name` for the wire, and how to check a JSON value
    (`adapter`: a pydantic `TypeAdapter`, or None for a raw schema)."""

    schema: dict[str, Any]
    name: str
    adapter: Any = None
    validator: Any = field(default=None, repr=False)

    @property
    def wrapped(self) -> bool:
        """Whether the schema's root is not an object, so the wire carries it as `{"answer": ...}`."""
        return self.schema.get("type") != "object"

    def wire_schema(self) -> dict[str, Any]:
        """The schema as sent to the provider: an object at its root, its `$defs` kept there."""
        if not self.wrapped:
            return self.schema
        inner = {k: v for k, v in self.schema.items() if k != "$defs"}
        out: dict[str, Any] = {"type": "object", "properties": {WRAP_KEY: inner}, "required": [WRAP_KEY],
                               "additionalProperties": False}
        if "$defs" in self.schema:
            out["$defs"] = self.schema["$defs"]
        return out

    def response_format(self) -> dict[str, Any]:
        """The `response_format` request field that asks for this schema."""
        return {"type": "json_schema", "json_schema": {"name": self.name, "schema": self.wire_schema(),
                                                       "strict": False}}

    def tool_spec(self) -> dict[str, Any]:
        """The `final_answer` tool, whose parameters are the schema."""
        return {"type": "function", "function": {
            "name": ANSWER_TOOL, "parameters": self.wire_schema(),
            "description": f"Give your final answer ({self.name}) as this call's arguments. This ends the task: "
                           "call it once, when you have everything the answer needs."}}

    def check(self, text: str, *, wire: bool = True) -> tuple[Any, str | None]:
        """`text` as JSON checked against the schema: (the JSON value, None) or (None, what is wrong). `wire`:
        the text is as sent on the wire (wrapped when the schema is)."""
        match = _FENCE.match(text)
        try:
            data = json.loads(match.group(1) if match else text)
        except ValueError as e:
            return None, f"the answer is not JSON ({e}); it began: {text[:200]!r}"
        except RecursionError:  # the model's text, nested deeper than the parser goes: feedback, not a crash
            return None, TOO_DEEP
        if wire and self.wrapped:
            if not isinstance(data, dict) or WRAP_KEY not in data:
                return None, f"the answer must be a JSON object with the key {WRAP_KEY!r} holding the value"
            data = data[WRAP_KEY]
        try:
            errors = self._errors(data)
        except RecursionError:  # parsed, but too deep for the validator
            return None, TOO_DEEP
        return (data, None) if errors is None else (None, errors)

    def _errors(self, data: Any) -> str | None:
        if self.adapter is not None:
            from pydantic import ValidationError

            try:
                self.adapter.validate_json(json.dumps(data))
            except ValidationError as e:
                return _cut("\n".join(f"- {'.'.join(map(str, err['loc'])) or '(root)'}: {err['msg']}"
                                      for err in e.errors(include_url=False)))
            return None
        from ..tools.schema_regex import UnsafePattern

        try:
            errors = sorted(self.validator.iter_errors(data), key=lambda err: list(err.absolute_path))
        except UnsafePattern as e:  # a spec made without `output_spec`'s look at its patterns: told, not a crash
            return f"- (schema): {e}"
        if not errors:
            return None
        return _cut("\n".join(f"- {'.'.join(map(str, err.absolute_path)) or '(root)'}: {err.message}"
                              for err in errors))

    def value(self, answer: str) -> Any:
        """The typed value of a valid answer's JSON text (a model instance, a list of them, a plain value)."""
        if self.adapter is not None:
            return self.adapter.validate_json(answer)
        return json.loads(answer)

    def output(self, status: str, answer: str) -> Any:
        """What `RunResult.output` is for a run that ended `status` with `answer`: the typed value of a completed
        run's answer, else None (also for an answer no check held to the type, as a resumed plan's)."""
        if status != "completed":
            return None
        _, errors = self.check(answer, wire=False)
        return self.value(answer) if errors is None else None


def output_spec(output_type: Any) -> OutputSpec:
    """The spec of `output_type` (a type, a `JsonSchema`, or a raw schema dict); a `UserError` when it is
    neither a type pydantic can check nor a valid JSON schema."""
    if isinstance(output_type, dict):
        output_type = JsonSchema(output_type)
    if isinstance(output_type, JsonSchema):
        try:
            return _schema_spec(output_type)
        except RecursionError:  # jsonschema's own look at the schema recurses as deep as it nests
            raise UserError("the output schema nests too deeply to be checked") from None
    from pydantic import PydanticSchemaGenerationError, PydanticUserError, TypeAdapter

    try:
        adapter = TypeAdapter(output_type)
        schema = adapter.json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as e:
        raise UserError(f"output_type {output_type!r} cannot be an answer's type: {e}") from None
    # a class names its schema; `list[City]` or a union is just an answer
    name = output_type.__name__ if isinstance(output_type, type) else schema.get("title") or "answer"
    return OutputSpec(schema, _wire_name(name), adapter)


def _schema_spec(output_type: JsonSchema) -> OutputSpec:
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    from ..tools import schema_bounds, schema_regex

    cls = validator_for(output_type.schema)
    try:
        cls.check_schema(output_type.schema)
    except SchemaError as e:
        raise UserError(f"the output schema is not a valid JSON schema: {e.message}") from None
    if (cycle := _ref_cycle(output_type.schema)) is not None:
        raise UserError(f"the output schema refers to itself without ever saying what a value is ({cycle}): "
                        "no answer could be checked against it")
    # The answer is the model's text, checked on the event loop: `pattern` is searched with RE2 (Python's
    # `re` takes exponential time on `^(a+)+$`), as tools' arguments are, and `uniqueItems` in linear time.
    # A pattern RE2 cannot run is refused here, where its owner hears of it, not at every answer.
    if schema_regex.install() and (why := schema_regex.unsafe_pattern(output_type.schema, True)) is not None:
        raise UserError(f"the output schema cannot be checked: {why}")
    schema_bounds.install()
    return OutputSpec(output_type.schema, _wire_name(output_type.name), validator=cls(output_type.schema))


_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def _ref_cycle(schema: dict[str, Any]) -> str | None:
    """The path of a loop of `$ref`s (and `allOf`, `not`, ...) that apply to the same value, or None.

    Following such a loop never reaches a keyword that looks at the value, nor a part of it (`properties`,
    `items`: a recursive schema for a tree is fine), so checking any answer recursed until "nests too deeply",
    and every retry was a model call spent. Only local refs (`#/...`) are followed; `#anchor` and other
    documents are not, and jsonschema says what it makes of them."""
    done: set[str] = set()
    for start in _in_place_nodes(schema):
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, bool]] = [(start, False)]
        while stack:  # depth first, without recursion: a schema may nest thousands of levels
            node, leaving = stack.pop()
            if leaving:
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if node in on_path:
                return " -> ".join("#" + p for p in [*path[path.index(node):], node])
            if node in done:
                continue
            path.append(node)
            on_path.add(node)
            stack.append((node, True))
            stack.extend((nxt, False) for nxt in _in_place_edges(schema, node))
    return None


def _in_place_nodes(schema: Any, pointer: str = "") -> list[str]:
    """Every place in `schema` that holds a `$ref` (where a loop can start), as JSON pointers."""
    out: list[str] = []
    stack: list[tuple[Any, str]] = [(schema, pointer)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                out.append(where)
            stack.extend((v, f"{where}/{_escape(str(k))}") for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}/{i}") for i, v in enumerate(value))
    return out


def _in_place_edges(schema: dict[str, Any], pointer: str) -> list[str]:
    """The schemas that apply to the same value as the one at `pointer`: its `$ref`'s target, its `allOf`'s..."""
    node = _resolve(schema, pointer)
    if not isinstance(node, dict):
        return []
    out: list[str] = []
    ref = node.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        from urllib.parse import unquote

        out.append(unquote(ref[1:]))
    for key in _IN_PLACE:
        sub = node.get(key)
        if isinstance(sub, list):
            out.extend(f"{pointer}/{key}/{i}" for i in range(len(sub)))
        elif isinstance(sub, dict) and key == "dependentSchemas":
            out.extend(f"{pointer}/{key}/{_escape(str(k))}" for k in sub)
        elif isinstance(sub, dict):
            out.append(f"{pointer}/{key}")
    return out


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _resolve(schema: Any, pointer: str) -> Any:
    """The value at a JSON pointer (`/definitions/a`), or None when there is none."""
    value = schema
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isascii() and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _wire_name(name: str) -> str:
    """A name the providers take for a schema: letters, digits, `_` and `-`, at most 64."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "answer"


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "\n[...]"


Checker = Callable[[int, str], Awaitable["bool | Ending"]]


class OutputCheck:
    """Checks the final answers of one run against its output spec; `invalid` counts the answers turned down.

    Made per run (`attach_output`): the run's answer check for a text answer (`__call__`), and what takes a
    turn's `final_answer` call (`answer_call`). `then` is the check a valid answer passes next (a reviewer).
    """

    def __init__(self, run: Run, spec: OutputSpec, mode: OutputMode, then: Checker | None = None) -> None:
        self.run, self.spec, self.mode, self.then = run, spec, mode, then
        self.invalid = 0

    async def __call__(self, step: int, text: str) -> bool | Ending:
        """A text answer: the typed answer when it validates (and `then` lets it stand), else False with the
        errors in the conversation, or `invalid_output` when the retries are used up."""
        if self.mode == "tool":
            return self._turn_down(step, text, "it was not given as a call of final_answer", CALL_IT)
        data, errors = self.spec.check(text)
        if errors is not None:
            return self._turn_down(step, text, errors, INVALID.format(errors=errors, how=""))
        if self.then is not None:
            verdict = await self.then(step, text)
            if verdict is not True:
                return verdict
        return "completed", _dumps(data), None

    async def answer_call(self, step: int, message: Message) -> bool | Ending | None:
        """A turn with tool calls: None when none is `final_answer` (the calls run as usual); else every other
        call is answered as not run, and the answer stands (an ending) or is turned down (False, or
        `invalid_output`) with the errors as the call's result."""
        calls = message.tool_calls
        final = next((c for c in calls if c.name == ANSWER_TOOL), None)
        if final is None:
            return None
        run = self.run
        for call in calls:
            if call is not final:
                run.emit(ToolCallFinished(run.run_id, step, call.id, call.name, NOT_RUN, is_error=True))
        data, errors = self.spec.check(final.arguments or "{}")
        if errors is None:
            run.emit(ToolCallFinished(run.run_id, step, final.id, final.name, RECEIVED))
            answer = _dumps(data)
            if self.then is not None:  # a reviewer's feedback follows the call's result, as a note
                verdict = await self.then(step, answer)
                if verdict is not True:
                    return verdict
            return "completed", answer, None
        run.emit(ToolCallFinished(run.run_id, step, final.id, final.name,
                                  f"Error: the answer does not match the schema:\n{errors}\nCall {ANSWER_TOOL} again "
                                  "with arguments that match it.", is_error=True))
        return self._turn_down(step, final.arguments, errors, None)

    def _turn_down(self, step: int, text: str, errors: str, feedback: str | None) -> bool | Ending:
        run = self.run
        self.invalid += 1
        retries = run.agent.config.output_retries
        if self.invalid > retries:
            return ("invalid_output", text, f"the answer did not match the output schema after {retries} "
                                             f"retr{'y' if retries == 1 else 'ies'}: {errors}")
        if feedback is not None:
            run.emit(Feedback(run.run_id, step, feedback))
        return False


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def attach_output(run: Run) -> None:
    """Make `run` answer in its config's output type: the request of every step asks for the schema the way its
    model can be held to it, and the answer check (any reviewer after it) validates the answer."""
    spec: OutputSpec | None = run.agent.config.output
    if spec is None:
        return
    agent = run.agent
    mode = output_mode(agent.model)
    settings = agent.model_settings or ModelSettings()
    if mode == "tool":
        run.step_settings = must_call(settings)
        run.step_tools = (spec.tool_spec(),)
        run.step_tokens = agent.token_counter.text(json.dumps(run.step_tools))
    else:
        fmt = spec.response_format()
        run.step_settings = replace(settings, extra={**settings.extra, "response_format": fmt})
        run.step_tokens = agent.token_counter.text(json.dumps(fmt))  # providers bill the schema as prompt
    inner = run.answer_checker

    def checker(run: Run, first: int) -> OutputCheck:
        check = OutputCheck(run, spec, mode, inner(run, first) if inner is not None else None)
        run.answer_call = check.answer_call
        return check

    run.answer_checker = checker
