"""Subscriptions and routes."""
