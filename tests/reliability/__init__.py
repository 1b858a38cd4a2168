"""Reliability tests (issue 7): crashes, network faults, hostile input, concurrency, leaks, secrets."""
