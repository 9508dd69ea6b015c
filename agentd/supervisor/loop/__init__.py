"""The reactor loop and its parts."""
