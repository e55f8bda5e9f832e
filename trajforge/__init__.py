"""trajforge: a self-evolving data engine for GUI agents."""
