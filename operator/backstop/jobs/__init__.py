"""The PySpark re-optimization job (``python -m backstop.jobs.reoptimize``): metrics in,
re-planned topologies out. The operator runs it as a child process; nothing imports it
but the CLI."""
