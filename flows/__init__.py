"""Prefect flows: composition of the stages, nothing else (see DESIGN.md)."""
