"""Benchmarks of crr against Gupta counting and full recomputation."""
