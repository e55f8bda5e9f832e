"""Verifiers, step and trajectory critics, CSRS calibration."""
