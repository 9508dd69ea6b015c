"""What agentd records and shows about a run: telemetry, counters, metrics, traces, outputs.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.observe.health`      ``/healthz``, ``/readyz`` and ``/metrics`` over HTTP.
* :mod:`agentd.observe.streamjson`  ``--output stream-json``: one JSON line per step on stdout.
* :mod:`agentd.observe.metrics`     what Prometheus sees, from the events and counters.
* :mod:`agentd.observe.tracing`     OpenTelemetry spans per cause, over OTLP/HTTP.
* :mod:`agentd.observe.sdnotify`    systemd's ``sd_notify`` protocol.
* :mod:`agentd.observe.counters`    the run's counters, read by ``/metrics`` and ``supervisor.exit``.
* :mod:`agentd.observe.telemetry`   one line per event on stderr (NDJSON or text).
* :mod:`agentd.observe.vocabulary`  the closed vocabulary of events and fields
  (``python -m agentd.observe.vocabulary`` writes docs/telemetry.md).
* :mod:`agentd.observe.histograms`  latency histograms (pure).
* :mod:`agentd.observe.output`      bounded output buffers off the reactor's path.
* :mod:`agentd.observe.timeline`    an opt-in cross-process timeline for the benchmarks.
* :mod:`agentd.observe.humanlog`    telemetry for a person: the ``human`` and ``text`` formats.
* :mod:`agentd.observe.errorline`   the last line of a failed run (``agentd: error: WHAT — fix: HOW``).
* :mod:`agentd.observe.activity`    the recent routing decisions and per-minute counts.
* :mod:`agentd.observe.statuspage`  the status page served at ``GET /`` on the health address.

Above :mod:`agentd.events` (metrics and health read the event types) and below
everything that reports (upstream, models, watches, the supervisor).
"""
