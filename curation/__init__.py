"""Trajectory dedup, guidance and thought synthesis, error-recovery samples."""
