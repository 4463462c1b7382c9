"""Tools: typed functions the model may call, their registry and their executor."""

from .base import Tool, ToolArgumentsError, ToolContext, ToolResult, tool
from .registry import ToolSet

__all__ = ["Tool", "ToolArgumentsError", "ToolContext", "ToolResult", "ToolSet", "tool"]
