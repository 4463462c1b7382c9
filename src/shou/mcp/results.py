"""An MCP server's results checked against its tools' output schemas off the event loop, with a deadline.

The SDK checks a result against the tool's `outputSchema` (the server's) with `jsonschema`, on the event
loop, before `call_tool` returns: a schema and result chosen to be slow to check (`uniqueItems` over
thousands of objects) froze `shou serve` for every request. `bound_result_checks` replaces that check on a
connected client with the same one run by shou.tools.schema_bounds: in a worker thread, awaited with a
deadline, and `uniqueItems` in linear time.
"""

from __future__ import annotations

import json
from typing import Any

from ..tools.schema_bounds import checked_off_loop
from ..tools.schema_bounds import install as linear_unique_items
from ..tools.schema_regex import install as linear_patterns

__all__ = ["bound_result_checks"]


def bound_result_checks(client: Any, seconds: float) -> None:
    """Make `client` (an `mcp.Client`) check results in a worker thread, giving up after `seconds`. A client
    without the session this knows (another SDK version) is left as it is."""
    session = getattr(client, "session", None)
    schemas = getattr(session, "_tool_output_schemas", None)
    if session is None or not isinstance(schemas, dict) or not hasattr(session, "validate_tool_result"):
        return
    linear_unique_items()
    linear_patterns()
    validators: dict[str, Any] = {}

    async def validate_tool_result(name: str, result: Any) -> None:
        """The SDK's `validate_tool_result`, its `jsonschema` work off the loop (see the module)."""
        if name not in session._tool_output_schemas:
            await session.list_tools()  # as the SDK does: the schema of a tool not listed yet
        schema = session._tool_output_schemas.get(name)
        if schema is None:
            return
        if result.structured_content is None and "structured_content" not in result.model_fields_set:
            raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")
        await checked_off_loop(lambda: _check(validators, name, schema, result.structured_content), seconds,
                               f"the result of {name!r}")

    session.validate_tool_result = validate_tool_result


def _check(validators: dict[str, Any], name: str, schema: dict[str, Any], instance: Any) -> None:
    """Validate `instance` (in a worker thread); `RuntimeError` as the SDK raises them."""
    from jsonschema import SchemaError, exceptions
    from jsonschema.validators import validator_for
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    key = f"{name}\0{json.dumps(schema, sort_keys=True, default=repr)}"
    validator = validators.get(key)
    if validator is None:
        cls = validator_for(schema)
        try:
            cls.check_schema(schema)
        except SchemaError as e:
            raise RuntimeError(f"Invalid schema for tool {name}: {e.message}") from None
        validator = validators[key] = cls(schema, registry=Registry())  # $refs resolve within the schema only
    try:
        error = exceptions.best_match(validator.iter_errors(instance))
    except Unresolvable as e:
        raise RuntimeError(f"Invalid schema for tool {name}: {e}") from None
    except RecursionError:
        raise RuntimeError(f"Invalid structured content returned by tool {name}: it nests too deeply to check") \
            from None
    if error is not None:
        raise RuntimeError(f"Invalid structured content returned by tool {name}: {error.message}")
