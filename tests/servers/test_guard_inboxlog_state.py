"""Mutation guards for servers/_inboxlog.py: the InboxLog state machine: feed, gaps, acks, refills, restarts and snapshots (scripts/mutate)."""
