"""The shared vocabulary of agentd."""
