"""Stand-ins for what a local cluster lacks: the node simulator (and its pod watch), the
real-node driver behind ``python -m backstop_testkit nodes`` and the metrics generator."""
