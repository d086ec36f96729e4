"""Benchmarks: figures with ratios against a baseline measured in the same run (``python -m bench``)."""
