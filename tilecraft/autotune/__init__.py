"""Autotuning: the config space, the benchmarking engine, searches and the tuning database."""
