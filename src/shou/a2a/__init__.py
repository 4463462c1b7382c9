"""The Agent2Agent protocol (A2A 1.0), with the official `a2a-sdk`: remote agents as shou tools.

`[a2a_agents.NAME]` agents (shou.a2a.spec) are offered as the tool `NAME` (shou.a2a.tool): their cards are
read once and cached (shou.a2a.card), every request goes through one bounded client that reaches only the
configured address (shou.a2a.http), and a call follows the remote task to its end (shou.a2a.call). shou as
an A2A agent, the other direction, is a face of `shou serve` (shou.serve.a2a_routes).
"""

from __future__ import annotations

from .spec import RemoteAgentSpec, remote_specs

__all__ = ["RemoteAgentSpec", "remote_specs"]
