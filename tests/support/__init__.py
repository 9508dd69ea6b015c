"""Shared test helpers (launchers, files, HTTP probes); tests import these, never each other."""
