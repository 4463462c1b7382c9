"""A model named for cheaper work (summaries, reviews, a named sub-agent's): resolved here, in models/, so
that the agent side asks for it by name and knows no provider."""

from __future__ import annotations

from typing import Any

from . import get_model, other_model
from .base import Model

__all__ = ["model_named"]


def model_named(model: Model | str | None, settings: Any) -> Model | None:
    """A model named for cheaper work (summaries, reviews): another model of the same provider, or
    PROVIDER:MODEL."""
    if not isinstance(model, str):
        return model
    return get_model(settings=other_model(settings, model)) if settings is not None else get_model(model)
