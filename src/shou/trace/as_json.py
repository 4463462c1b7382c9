"""Traces as JSON, as `shou trace --json` and the server's trace endpoints give them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..usage import Usage
from .records import ModelCallTrace, RunTrace

__all__ = ["call_json", "run_json", "usage_json"]


def usage_json(usage: Usage | None, known: float | None = None) -> dict[str, Any] | None:
    """A usage as JSON; `known_cost` (when given) is the known part of an unknown total cost."""
    if usage is None:
        return None
    return asdict(usage) if known is None else {**asdict(usage), "known_cost": known}


def call_json(call: ModelCallTrace) -> dict[str, Any]:
    """A model call as JSON: the request's full messages when resolved (null when not recorded)."""
    return {
        "id": call.id, "run_id": call.run_id, "step": call.step, "model": call.model, "purpose": call.purpose,
        "agent": call.agent,
        "response_model": call.response_model, "sent_model": call.sent_model, "provider": call.provider,
        "at": call.at,
        "request": {"recorded": call.recorded, "messages": call.messages, "tools": call.tools, "params": call.params,
                    "tokens_estimate": call.prompt_tokens, "message_count": call.message_count,
                    "tool_count": call.tool_count, "pruned": call.pruned},
        "response": None if call.message is None else {"message": call.message.to_wire(),
                                                       "finish_reason": call.finish_reason},
        "usage": usage_json(call.usage), "failed_attempts_usage": usage_json(call.void_usage),
        "latency": call.latency, "ttft": call.ttft, "retries": call.retries,
        "cached": call.cached, "error": call.error, "notes": call.notes,
    }


def run_json(run: RunTrace) -> dict[str, Any]:
    """A run as JSON (resolve its calls first for their requests' messages)."""
    usage, known = run.usage
    return {
        "run_id": run.run_id, "parent": run.parent, "session": run.session, "task": run.task, "model": run.model,
        "status": run.status,
        "answer": run.answer, "error": run.error, "started": run.started, "ended": run.ended,
        "wall_time": run.wall_time, "resumed": run.resumed, "steps": len(run.steps),
        "usage": usage_json(usage, known),
        "model_calls": [call_json(c) for c in run.model_calls],
        "tool_calls": [asdict(t) for t in run.tool_calls],
        "compactions": [{**asdict(c), "usage": usage_json(c.spent)} for c in run.compactions],
        "notices": [{"step": step, "kind": kind, "text": text} for step, kind, text in run.notices],
        "handoffs": [asdict(h) for h in run.handoffs],
    }
