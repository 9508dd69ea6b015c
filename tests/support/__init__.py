"""Helpers shared by tests (server launchers, recording telemetry, files, HTTP probes); tests import these, never each other."""
