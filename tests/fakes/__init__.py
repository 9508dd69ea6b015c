"""Fakes at the seams that speak the real protocols (loopback servers, scripted peers)."""
