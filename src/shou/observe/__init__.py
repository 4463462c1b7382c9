"""Observers of a run's event stream: OpenTelemetry export (`otel.py`) and failure-rate alerts (`alerts.py`).

An observer is a callable taking each `Event` as the run emits it, after the event is recorded in the
session log; it must be quick and must not raise (what it does slowly, it does on another thread or task).
"""
