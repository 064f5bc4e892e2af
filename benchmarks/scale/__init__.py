"""The pieces of benchmarks/bench_scale.py: its corpus and inputs, its jobs, how they are measured."""
