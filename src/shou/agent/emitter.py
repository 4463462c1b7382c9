"""The one way an event goes: redact -> append (write-ahead) -> fold -> observers -> consumer.

Every event of a session, from a run, a sub-run (through its parent's emitter), a face (the serve cancel
path, the OpenAI endpoint's history, `shou approve`) or the closing of a run a crash left open, passes an
`Emitter`: a guarantee kept here is kept everywhere, since nothing else writes a session's log
(`Session._write` is this module's alone).

Streamed fragments (`TextDelta`, `ToolCallDelta`) are never stored; they are redacted here too, each stream
through a `StreamRedactor` that holds back what could be the start of a secret split across fragments. What
is held is given out before the run's next event of another kind (its `ModelResponse`, a retry's notice,
its end), so the consumer sees the fragments whole and in order.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ..event_codec import event_from_dict
from ..events import Event, RunFinished, TextDelta, ToolCallDelta, ToolCallFinished
from ..redact import Redactor
from ..redact_stream import StreamRedactor
from ..session import INTERRUPTED
from ..wellformed import well_formed, well_formed_text

if TYPE_CHECKING:
    from ..session import OpenRun, Session

__all__ = ["Emitter"]

_log = logging.getLogger("shou")
_NO_SECRETS = Redactor(())
_TEXT = -1  # the stream key of a run's text fragments; call fragments are keyed by their index
Observer = Callable[[Event], Any]


class Emitter:
    """Takes every event of one session the one way. `redactor` replaces known secrets (none when left out),
    `observers` see each event after the log (an observer's own event joins the stream after it; an
    observer's exception is logged, never fatal), `consumer` gets it last (a run's queue; None: no one, as
    for a drained run or `/clear`: the events are logged and observed all the same)."""

    __slots__ = ("_streams", "consumer", "observers", "redactor", "session")

    def __init__(self, session: Session, redactor: Redactor | None = None, observers: Iterable[Observer] = (),
                 consumer: Callable[[Event], Any] | None = None) -> None:
        self.session = session
        self.redactor = redactor if redactor is not None else _NO_SECRETS
        self.observers = tuple(observers)
        self.consumer = consumer
        # (run id, stream) -> its redactor and its last fragment (the shape of what is given out at its end)
        self._streams: dict[tuple[str, int], tuple[StreamRedactor, Event]] = {}

    def emit(self, event: Event) -> None:
        """Redact, log, fold, observe and hand on `event` (durable at the next `commit()`)."""
        kind = type(event)
        if kind is TextDelta or kind is ToolCallDelta:
            # never stored nor folded: with no one to show them to (`arun`), there is nothing to redact them for
            if self.observers or self.consumer is not None:
                self._fragment(event)
            return
        if self._streams:
            self._end_streams(event.run_id)
        event, data = self.redactor.checked(event)
        if data is None:
            event, data = self._encoded(event)
        self.session._write(event, data)
        if self.observers:
            self._hand_on(event)
        elif self.consumer is not None:
            self.consumer(event)

    def _encoded(self, event: Event) -> tuple[Event, bytes]:
        """The event and its JSON. Text no UTF-8 encodes (a lone surrogate: a file name's undecodable bytes, a
        provider's `"\\ud800"`) is repaired here, the one place every event passes, with U+FFFD: such an event
        could be neither logged nor sent to a model, and a tool's side effect would go unrecorded. The repair
        is redacted again: it joins a surrogate pair written as two code points into the character it spells,
        which may complete a secret."""
        try:
            return event, orjson.dumps(event.to_dict())
        except TypeError as e:
            if "surrogates" not in str(e):
                raise
        fixed = well_formed(event.to_dict())
        try:
            event = self.redactor.event(event_from_dict(fixed))
        except ValueError:  # a type of the caller's own, which the log cannot read back: its row is repaired
            return self.redactor.event(event), orjson.dumps(self.redactor.value(fixed))
        return event, orjson.dumps(event.to_dict())

    def commit(self) -> None:
        """Make everything emitted so far durable: called before every side effect."""
        self.session.commit()

    def _hand_on(self, event: Event) -> None:
        extra: list[Event] | None = None
        for observe in self.observers:  # exporters and alerts read the same stream, after the log
            try:
                out = observe(event)
            except Exception:  # an observer's bug must not end the run; it is logged, not hidden
                _log.exception("observer %r failed on a %s event", observe, event.type)
                continue
            if isinstance(out, Event):
                if extra is None:
                    extra = []
                extra.append(out)
        if self.consumer is not None:
            self.consumer(event)
        if extra is not None:  # after the event that caused it, as the consumer would tell it
            for out in extra:
                self.emit(out)

    def _fragment(self, event: Any) -> None:
        event = _well_formed_fragment(event)
        redactor = self.redactor
        if redactor.pattern is None:
            self._hand_on(event)
            return
        is_text = type(event) is TextDelta
        key = (event.run_id, _TEXT if is_text else event.index)
        held = self._streams.get(key)
        stream = held[0] if held is not None else StreamRedactor(redactor)
        self._streams[key] = (stream, event)
        if is_text:
            shown = stream.feed(event.text)
            if shown:
                self._hand_on(event if shown is event.text else dataclasses.replace(event, text=shown))
            return
        shown = stream.feed(event.arguments)
        name = redactor.text(event.name) if event.name else event.name
        if shown or name:
            self._hand_on(event if shown is event.arguments and name is event.name
                          else dataclasses.replace(event, name=name, arguments=shown))

    def _end_streams(self, run_id: str) -> None:
        """Give out what run `run_id`'s streams held back: they ended (its next event is not a fragment)."""
        for key in [k for k in self._streams if k[0] == run_id]:
            stream, last = self._streams.pop(key)
            rest = stream.end()
            if not rest:
                continue
            if isinstance(last, TextDelta):
                self._hand_on(dataclasses.replace(last, text=rest))
            else:
                self._hand_on(dataclasses.replace(last, name=None, arguments=rest))

    # ------------------------------------------------------------------ the session's own events

    def clear(self) -> None:
        """Forget the session's messages from here on (the log keeps them)."""
        from ..events import HistoryCleared

        self.emit(HistoryCleared(run_id=""))
        self.commit()

    def close_interrupted(self, why: str = INTERRUPTED) -> OpenRun | None:
        """End the run a killed process left open: its unanswered calls get `why` as an error result, and the
        run a `RunFinished` with status `interrupted`. Returns that run (None if there was none)."""
        run = self.session.open_run
        if run is None:
            return None
        if run.waiting:
            why = "Error: not run: it was waiting for a person (an approval or an answer) when a new task started."
        for call in run.unanswered:
            self.emit(ToolCallFinished(run.run_id, run.step, call.id, call.name, why, is_error=True))
        why_end = ("it was waiting for a person when something else started on the session" if run.waiting else
                   "the process running it stopped before it finished; `shou resume` continues such a run")
        self.emit(RunFinished(run.run_id, "interrupted", "", run.step, run.usage, 0.0, why_end))
        self.commit()
        return run




def _well_formed_fragment(event: Any) -> Any:
    """A streamed fragment with its text repaired as `_encoded` repairs a logged event's (every face's stream
    is JSON or a terminal, and neither takes a lone surrogate)."""
    if type(event) is TextDelta:
        text = well_formed_text(event.text)
        return event if text is event.text else dataclasses.replace(event, text=text)
    arguments = well_formed_text(event.arguments)
    name = well_formed_text(event.name) if event.name else event.name
    if arguments is event.arguments and name is event.name:
        return event
    return dataclasses.replace(event, name=name, arguments=arguments)
