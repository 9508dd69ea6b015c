"""Helpers shared by tests (never test modules themselves)."""
