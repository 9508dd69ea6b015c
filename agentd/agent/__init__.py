"""The agent side: the inner agentic loop, the child process entry, the zygote."""
