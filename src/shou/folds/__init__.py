"""The small folds a session's state is made of, one concern each.

A session's state is the fold of its events (the log is the checkpoint). Each fold here keeps one part of
it and says which event types it reads (`own` for the session's runs, `sub` for sub-runs' events, those
with `parent` set); `shou.session.MessageFold` builds one table from event type to the handlers that want
it and applies every event through it.
"""

from __future__ import annotations

from .approvals import ApprovalsFold
from .conversation import ConversationFold, tool_messages
from .openrun import OpenRun, OpenRunFold
from .questions import QuestionsFold
from .requests import RequestsFold
from .scratch import ScratchFold
from .spending import SpendingFold

__all__ = ["ApprovalsFold", "ConversationFold", "OpenRun", "OpenRunFold", "QuestionsFold", "RequestsFold",
           "ScratchFold", "SpendingFold", "tool_messages"]
