"""The agent side: the inner agentic loop, what a tool result becomes for the model, the child process entry, the zygote."""
