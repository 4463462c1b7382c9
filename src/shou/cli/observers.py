"""The observers a CLI process gives its runs and decisions, from the settings."""

from __future__ import annotations

import logging

from ..errors import UserError


def observers(settings, otel: bool = False, store=None) -> list:  # -> list[observer]
    """The observers the settings ask for: the failure-rate alert monitor (shared by the process's runs,
    starting from the last calls the workspace's log holds) and, when enabled, OpenTelemetry export."""
    from ..observe.alerts import shared_monitor

    monitor = shared_monitor(settings.alert_window, settings.alert_threshold, settings.alert_webhook)
    if store is not None and not monitor.seeded:
        from ..trace import recent_outcomes

        try:
            monitor.seed(recent_outcomes(store, 4 * settings.alert_window))
        except Exception:  # a log that cannot be read: the alert starts from nothing, as before
            monitor.seeded = True
    out: list = [monitor]
    env = settings.env
    if otel or settings.otel or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        try:
            from ..observe.otel import otel_from_settings
        except ImportError as e:
            raise UserError(f"OpenTelemetry export needs its packages: pip install 'shou[otel]' ({e})") from None
        # Request messages come from the events themselves (the observer keeps the contents they carried).
        exporter = otel_from_settings(env, enabled=True, content=settings.otel_content)
        if exporter is not None:
            # The local trace is the record; a collector that is down must not fill the terminal with errors.
            logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
            out.append(exporter)
    return out
