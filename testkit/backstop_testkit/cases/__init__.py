"""Topologies and workloads that the tests and the benchmarks both build: the seeds' cases.

A test asserts a claim on them, a benchmark prints its figures on the same ones; keeping
them here lets ``tests`` and ``bench`` share them without importing each other.
"""
