"""Mutation guards for servers/_inboxlog.py: the log's line parsing, the newline search and the walk over the file (scripts/mutate)."""
