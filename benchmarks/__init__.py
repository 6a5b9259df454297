"""Benchmarks: the harness behind ``snowfall benchmark`` (harness.py) and the measurement
scripts it and docs/benchmarks.md use (each also runs on its own: ``python
benchmarks/NAME.py --help``)."""
