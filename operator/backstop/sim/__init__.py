"""Simulation and test harnesses: the node simulator, the metrics generator and the
real-node harness. Only the CLI (and tests) import them; the controller never does."""
