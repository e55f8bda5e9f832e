"""Query generation from per-app navigation DAGs (GUI-Owl §6.2, AgentCPM-GUI §3.4)."""
