"""What agentd records and shows about a run."""
