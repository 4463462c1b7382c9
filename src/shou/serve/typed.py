"""Typed answers over the API: a run request's `options.output_schema`, checked when it comes, and the run's
`output` (its answer as JSON) in what the API shows of a run."""

from __future__ import annotations

import json
from typing import Any

from ..agent.output import JsonSchema, output_spec
from ..errors import UserError
from ..tools import schema_regex

MAX_SCHEMA_BYTES = 64_000  # a schema, not a payload: it goes into every request of the run


def check_output_schema(schema: dict[str, Any], where: str = "options.output_schema") -> None:
    """A 400 naming what is wrong unless `schema` is a JSON schema of a reasonable size."""
    from starlette.exceptions import HTTPException

    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise HTTPException(400, f"{where}: larger than {MAX_SCHEMA_BYTES // 1000} KB of JSON")
    try:
        output_spec(JsonSchema(schema))
    except UserError as e:
        raise HTTPException(400, f"{where}: {e}") from None
    # Without RE2, `output_spec` leaves patterns to Python's `re` (a developer's own schema); a caller's pattern
    # could then hold the event loop for minutes, so a schema from outside with one is refused.
    if not schema_regex.install() and (why := schema_regex.unsafe_pattern(schema, False)) is not None:
        raise HTTPException(400, f"{where}: {why}")


def requested_schema(response_format: Any) -> dict[str, Any] | None:
    """The schema a Chat Completions `response_format` asks for: `json_schema`'s, `{"type": "object"}` for
    `json_object`, None for `text` or none; a 400 for one that is not understood."""
    from starlette.exceptions import HTTPException

    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise HTTPException(400, "response_format: give {\"type\": \"json_schema\", \"json_schema\": {\"name\", "
                                 "\"schema\"}}, {\"type\": \"json_object\"} or {\"type\": \"text\"}")
    # each level checked for what it is before it is looked into: a string there was an AttributeError, a 500
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise HTTPException(400, "response_format.json_schema: must be an object {\"name\", \"schema\"}, not "
                                 f"{_json_type(spec)}")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise HTTPException(400, f"response_format.json_schema.schema: must be a JSON schema (an object), not "
                                 f"{_json_type(schema)}")
    return schema


def _json_type(value: Any) -> str:
    """What `value` is called in JSON, for a message: a caller wrote JSON, not Python."""
    if value is None:
        return "missing or null"
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "an array"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "an object")


def typed_output(options: dict[str, Any], status: str, answer: str) -> Any:
    """The run's answer as JSON when it was asked for with an output schema and completed; else None."""
    if not options.get("output_schema") or status != "completed":
        return None
    try:
        return json.loads(answer)
    except ValueError:  # pragma: no cover - a completed typed answer is valid JSON by construction
        return None
