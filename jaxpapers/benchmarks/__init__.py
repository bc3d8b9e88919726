"""Benchmarks built offline: procedurally generated worlds, environments and judges."""
