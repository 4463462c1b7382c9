"""shou (手, "hand"): the model thinks, shou acts.

```python
from shou import Agent, tool

@tool
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

agent = Agent("deepseek:deepseek-chat", tools=[add])
print(agent.run("What is 2 + 40?").answer)
```
Names are imported on first use, so `import shou` stays cheap.
"""

# Before any other import (no `from __future__` here, which is one): `python -m shou` puts the working folder
# first on sys.path, and a workspace file named like a module shou imports (`typing.py`, `asyncio/`), which a
# sandboxed program may leave, would run on the host at the person's next `python -m shou` there. While the
# package is found, `-m` is argv[0]. The `shou` command never had the folder on its path; now neither has this.
import os as _os
import sys as _sys

if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] == _os.getcwd():
    del _sys.path[0]

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Agent": "shou.agent.agent",
    "RunResult": "shou.agent.agent",
    "AgentSpec": "shou.agent.delegate",
    "AgentConfig": "shou.agent.config",
    "Guardrail": "shou.agent.guardrails",
    "GuardrailResult": "shou.agent.guardrails",
    "input_guardrail": "shou.agent.guardrails",
    "output_guardrail": "shou.agent.guardrails",
    "JsonSchema": "shou.agent.output",
    "SkillSet": "shou.skills",
    "ServerSpec": "shou.mcp.servers",
    "tool": "shou.tools.base",
    "Tool": "shou.tools.base",
    "ToolContext": "shou.tools.base",
    "ToolResult": "shou.tools.base",
    "ToolSet": "shou.tools.registry",
    "Policy": "shou.permissions",
    "Approver": "shou.agent.approvals",
    "PriceTable": "shou.pricing",
    "Session": "shou.session",
    "Message": "shou.messages",
    "ToolCall": "shou.messages",
    "ImagePart": "shou.messages",
    "TextPart": "shou.messages",
    "Usage": "shou.usage",
    "Model": "shou.models.base",
    "ModelSettings": "shou.models.base",
    "get_model": "shou.models",
    "OpenAICompatible": "shou.models.openai_compat",
    "ScriptedModel": "shou.models.scripted",
    "Settings": "shou.config",
    "load_settings": "shou.config",
    "SQLiteStore": "shou.store.sqlite",
    "ShouError": "shou.errors",
    "UserError": "shou.errors",
    "ConfigError": "shou.errors",
    "ModelError": "shou.errors",
    "ToolError": "shou.errors",
    "ContextPolicy": "shou.context.builder",
    "MemoryStore": "shou.memory",
    "events": "shou.events",
}

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentSpec",
    "Approver",
    "ConfigError",
    "ContextPolicy",
    "Guardrail",
    "GuardrailResult",
    "ImagePart",
    "JsonSchema",
    "MemoryStore",
    "Message",
    "Model",
    "ModelError",
    "ModelSettings",
    "OpenAICompatible",
    "Policy",
    "PriceTable",
    "RunResult",
    "SQLiteStore",
    "ScriptedModel",
    "ServerSpec",
    "Session",
    "Settings",
    "ShouError",
    "SkillSet",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolSet",
    "Usage",
    "UserError",
    "events",
    "get_model",
    "input_guardrail",
    "load_settings",
    "output_guardrail",
    "tool",
]

if TYPE_CHECKING:
    from . import events
    from .agent.agent import Agent, RunResult
    from .agent.approvals import Approver
    from .agent.config import AgentConfig
    from .agent.delegate import AgentSpec
    from .agent.guardrails import Guardrail, GuardrailResult, input_guardrail, output_guardrail
    from .agent.output import JsonSchema
    from .config import Settings, load_settings
    from .context.builder import ContextPolicy
    from .errors import ConfigError, ModelError, ShouError, ToolError, UserError
    from .mcp.servers import ServerSpec
    from .memory import MemoryStore
    from .messages import ImagePart, Message, TextPart, ToolCall
    from .models import get_model
    from .models.base import Model, ModelSettings
    from .models.openai_compat import OpenAICompatible
    from .models.scripted import ScriptedModel
    from .permissions import Policy
    from .pricing import PriceTable
    from .session import Session
    from .skills import SkillSet
    from .store.sqlite import SQLiteStore
    from .tools.base import Tool, ToolContext, ToolResult, tool
    from .tools.registry import ToolSet
    from .usage import Usage


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shou' has no attribute {name!r}")
    value = importlib.import_module(module) if name == "events" else getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
