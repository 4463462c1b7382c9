"""What the API accepts and answers, as pydantic models, and the OpenAPI document built from them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..agent.agent import MAX_TASK_CHARS
from ..usage import MOST_TOKENS

SESSION_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_HISTORY = 200  # messages in an OpenAI-style request


def _no_nul(value: Any) -> Any:
    """Text with a NUL character is refused: no store keeps it, and no person means it."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("must not contain the NUL character (\\u0000)")
    if isinstance(value, list):
        for part in value:
            if isinstance(part, dict):
                _no_nul(part.get("text"))
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


def _text_parts(value: Any) -> Any:
    """A text part's `text` must be text: anything else became the task through `str()` (`{'a': 1}`)."""
    if isinstance(value, list):
        for i, part in enumerate(value):
            if isinstance(part, dict) and part.get("type") == "text" and not isinstance(part.get("text"), str):
                raise ValueError(f"part {i} is of type text, and its text must be a string")
    return value


class RunOptions(BaseModel):
    """How to run: limits and the composition features (all optional)."""

    # strict: JSON's own types only; lax, `max_steps: true` was 1 step, `"5"` 5 and `plan: "yes"` on
    model_config = ConfigDict(extra="forbid", strict=True)
    max_steps: int | None = Field(None, ge=1, le=500)
    plan: bool = False
    reflect: bool = False
    code: bool = False
    token_budget: int | None = Field(None, ge=1, le=MOST_TOKENS)  # a database integer holds it
    max_cost: float | None = Field(None, ge=0, allow_inf_nan=False)
    output_schema: dict[str, Any] | None = Field(
        None, description="a typed answer: the final answer must be JSON matching this JSON schema (the run's "
                          "`output` is that JSON; an answer that keeps failing ends the run invalid_output)")


class RunRequest(BaseModel):
    """A task for the agent, in a new session or continuing one of the caller's."""

    model_config = ConfigDict(extra="forbid")
    task: Text = Field(min_length=1, max_length=MAX_TASK_CHARS)
    session: str | None = Field(None, pattern=SESSION_NAME)
    options: RunOptions = Field(default_factory=RunOptions)


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost: float | None = None


class RunInfo(BaseModel):
    """A run: `status` is queued, running, waiting_approval, waiting_input, or how it ended (completed, blocked by
    a guardrail, invalid_output, max_steps, error, ...; `error` says why)."""

    run_id: str
    session: str
    task: str
    status: str
    answer: str = ""
    output: Any = Field(None, description="with options.output_schema: the answer as JSON, once completed")
    error: str | None = None
    usage: Usage | dict[str, Any] = Field(default_factory=dict)
    created: float
    finished: float | None = None


class RunList(BaseModel):
    runs: list[RunInfo]


class SessionInfoOut(BaseModel):
    name: str
    title: str
    status: str
    runs: int
    created: float
    updated: float


class SessionList(BaseModel):
    sessions: list[SessionInfoOut]


class Transcript(BaseModel):
    """A session's conversation (Chat Completions messages) and its runs."""

    name: str
    status: str
    messages: list[dict[str, Any]]
    runs: list[RunInfo]


class ForkRequest(BaseModel):
    """Fork a session: `at` is the last step the fork keeps (the session's step number, or "RUN_ID:STEP";
    default its last step), `name` the new session's (default a fresh one)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # `at: true` was step 1
    at: int | Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None
    name: str | None = Field(None, pattern=SESSION_NAME)


class ForkOut(BaseModel):
    """The session a fork made, the one it was made from, and the step (session-wide) it was cut after."""

    name: str
    source: str
    step: int


class Decision(BaseModel):
    """A person's decision on a call that waits for approval."""

    model_config = ConfigDict(extra="forbid", strict=True)  # `allow` is true or false, not 1 nor "yes"
    allow: bool
    reason: Text = Field("", max_length=4000)
    run_id: Text | None = Field(None, max_length=200, description="the run, when call ids repeat across runs")


class DecisionOut(BaseModel):
    call_id: str
    allow: bool
    run_id: str


class Approval(BaseModel):
    call_id: str
    run_id: str
    session: str
    tool: str
    arguments: Any
    why: str
    rule: str = ""
    since: float


class ApprovalList(BaseModel):
    approvals: list[Approval]


class AnswerIn(BaseModel):
    """A person's answer to the question a run waits on (`ask_user`)."""

    model_config = ConfigDict(extra="forbid")
    text: Text = Field(max_length=20_000)
    call_id: Text | None = Field(None, max_length=200, description="which question, when several wait")


class AnswerOut(BaseModel):
    call_id: str
    run_id: str
    session: str


class Question(BaseModel):
    call_id: str
    run_id: str
    session: str
    question: str
    choices: list[str]
    since: float


class QuestionList(BaseModel):
    questions: list[Question]


class ChatMessage(BaseModel):
    """A Chat Completions message (text content; parts of type text are joined)."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[str | list[dict[str, Any]] | None, AfterValidator(_text_parts), AfterValidator(_no_nul)] = None


class ChatRequest(BaseModel):
    """The Chat Completions request; `model` names the agent. Sampling fields are accepted and ignored: the
    agent's own settings apply. `response_format` asks for a typed answer."""

    model_config = ConfigDict(extra="allow")
    model: str = "shou"
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_HISTORY)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = Field(
        None, description="json_schema (or json_object): a typed answer, the content being its JSON")


class Error(BaseModel):
    error: dict[str, str]


class FileEntry(BaseModel):
    """An entry of a workspace folder."""

    name: str
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    mtime: float


class FileList(BaseModel):
    """A workspace folder's entries (folders first), never `.shou/` or `.git/`."""

    path: str
    entries: list[FileEntry]
    truncated: bool


class Uploaded(BaseModel):
    """Where an upload was written, and its size in bytes."""

    path: str
    size: int


class Currency(BaseModel):
    """The currency costs are shown in: a cost in USD times `per_usd`."""

    code: str
    symbol: str
    per_usd: float


class ServerConfig(BaseModel):
    """The server's version, the model and tools its runs get, and its currency."""

    version: str
    model: str
    tools: list[str]
    currency: Currency


class UsageRowOut(BaseModel):
    """Tokens, requests and cost (USD; null when some call's price is unknown) of a day and model."""

    day: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    requests: int
    cost: float | None
    known_cost: float
    estimated: bool


class UsageOut(BaseModel):
    """The caller's usage by UTC day and model over the last `days` days, and its total."""

    days: int
    rows: list[UsageRowOut]
    total: UsageRowOut


_MODELS = [FileEntry, FileList, Uploaded, Currency, ServerConfig, UsageRowOut, UsageOut,
           RunOptions, RunRequest, Usage, RunInfo, RunList, SessionInfoOut, SessionList, Transcript, Decision,
           DecisionOut, Approval, ApprovalList, AnswerIn, AnswerOut, Question, QuestionList, ChatMessage,
           ChatRequest, ForkRequest, ForkOut, Error]


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel] | None, description: str) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if model is not None:
        out["content"] = {"application/json": {"schema": _ref(model)}}
    return out


def _op(summary: str, ok: tuple[str, type[BaseModel] | None, str], body: type[BaseModel] | None = None,
        params: tuple[str, ...] = (), errors: tuple[str, ...] = ("401", "404")) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {ok[0]: _json(ok[1], ok[2])}}
    for code in errors:
        op["responses"][code] = _json(Error, {"400": "bad request", "401": "no valid bearer token",
                                             "404": "not found (or another user's)", "409": "busy",
                                             "413": "request too large", "429": "too many runs"}[code])
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    if params:
        op["parameters"] = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params]
    return op


def _query(op: dict[str, Any], *params: tuple[str, str, str]) -> dict[str, Any]:
    """`op` with query parameters `(name, type, description)`."""
    op.setdefault("parameters", []).extend({"name": n, "in": "query", "required": False, "description": d,
                                            "schema": {"type": t}} for n, t, d in params)
    return op


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    schemas: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    sse = {"description": "Server-Sent Events: `id` (sequence number), `event` (type), `data` (the event's JSON)",
           "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    events = _op("Stream a run's events (resumable with Last-Event-ID)", ("200", None, ""), params=("run_id",))
    events["responses"]["200"] = sse
    events["parameters"] += [{"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
                             {"name": "after", "in": "query", "required": False, "schema": {"type": "integer"}}]
    chat = _op("OpenAI-compatible chat completion by an agent", ("200", None, ""), body=ChatRequest,
               errors=("400", "401", "429"))
    chat["responses"]["200"] = {"description": "a chat.completion, or chat.completion.chunk events when streaming",
                                "content": {"application/json": {"schema": {"type": "object"}},
                                            "text/event-stream": {"schema": {"type": "string"}}}}
    paths = {
        "/v1/runs": {
            "post": _op("Start a run", ("202", RunInfo, "queued or started"), body=RunRequest,
                        errors=("400", "401", "404", "409", "413", "429")),
            "get": _op("The caller's runs, newest first", ("200", RunList, "runs"), errors=("401",)),
        },
        "/v1/runs/{run_id}": {"get": _op("A run's status, answer and usage", ("200", RunInfo, "the run"),
                                         params=("run_id",))},
        "/v1/runs/{run_id}/events": {"get": events},
        "/v1/runs/{run_id}/cancel": {"post": _op("Cancel a run", ("202", RunInfo, "cancelling"),
                                                 params=("run_id",))},
        "/v1/runs/{run_id}/screenshots/{call_id}": {"get": _op(
            "The screenshot a browser call of the run saved (kept also when the model could not see it)",
            ("200", None, "the image"), params=("run_id", "call_id"))},
        "/v1/runs/{run_id}/trace": {"get": _op("A run's trace (as `shou trace --json`)",
                                               ("200", None, "the trace"), params=("run_id",))},
        "/v1/sessions": {"get": _op("The caller's sessions", ("200", SessionList, "sessions"), errors=("401",))},
        "/v1/sessions/{name}": {
            "get": _op("A session's transcript and runs", ("200", Transcript, "the session"), params=("name",)),
            "delete": _op("Delete a session and its log", ("204", None, "deleted"), params=("name",),
                          errors=("401", "404", "409")),
        },
        "/v1/sessions/{name}/fork": {"post": _op("Fork a session: a new one whose history is this one's up to a "
                                                 "step (this one is left as it is)", ("201", ForkOut, "forked"),
                                                 body=ForkRequest, params=("name",),
                                                 errors=("400", "401", "404", "409"))},
        "/v1/approvals": {"get": _op("Calls waiting for the caller's decision", ("200", ApprovalList, "waiting"),
                                     errors=("401",))},
        "/v1/approvals/{call_id}": {"post": _op("Allow or deny a waiting call; the run then goes on",
                                                ("200", DecisionOut, "decided"), body=Decision, params=("call_id",),
                                                errors=("400", "401", "404", "409"))},
        "/v1/questions": {"get": _op("Questions (ask_user) waiting for the caller's answer",
                                     ("200", QuestionList, "waiting"), errors=("401",))},
        "/v1/runs/{run_id}/answer": {"post": _op("Answer the question a run waits on; the run then goes on",
                                                 ("200", AnswerOut, "answered"), body=AnswerIn, params=("run_id",),
                                                 errors=("400", "401", "404", "409"))},
        "/v1/chat/completions": {"post": chat},
        "/v1/models": {"get": _op("The agents, as models", ("200", None, "a model list"), errors=("401",))},
        "/v1/config": {"get": _op("The server's version, model, tools and currency", ("200", ServerConfig, "setup"),
                                  errors=("401",))},
        "/v1/usage": {"get": _query(_op("The caller's usage by day and model", ("200", UsageOut, "usage"),
                                        errors=("400", "401")), ("days", "integer", "days back (1-3660; 30)"))},
        "/v1/files": {"get": _query(_op("A workspace folder, as the file tools see it", ("200", FileList, "entries"),
                                        errors=("400", "401", "404")), ("path", "string", "the folder ('': root)"))},
        "/v1/files/content": {
            "get": _query(_op("A workspace file's bytes (at most 20 MB)", ("200", None, "the file"),
                              errors=("400", "401", "404", "413")), ("path", "string", "the file"),
                          ("download", "integer", "1: as an attachment")),
            "put": _query(_op("Write a file into the workspace (the body is its bytes, at most 20 MB), where "
                              "write_file may", ("201", Uploaded, "written"), errors=("400", "401", "413")),
                          ("path", "string", "the file")),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "shou", "version": "1", "description": "Run shou agents over HTTP (docs/serve.md)."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
