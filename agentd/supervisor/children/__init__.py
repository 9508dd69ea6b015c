"""The child processes."""
