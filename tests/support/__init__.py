"""Helpers shared by tests (server launchers, recording telemetry); tests import these, never each other."""
