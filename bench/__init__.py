"""Benchmarks of the design's claims (issue 8): `python -m bench` runs them all; see bench/README.md."""
