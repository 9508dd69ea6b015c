"""Mutation guards for servers/_inboxlog.py: the cursor and ledger files' JSON, notes, and the channel notification's parameters (scripts/mutate)."""
