"""Benchmarks of save and load against baselines run side by side (``python -m benchmarks``)."""
