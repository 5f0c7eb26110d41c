"""Backstop's test kit: what tests, benchmarks and demos share, apart from the product.

* :mod:`backstop_testkit.sim`: the node simulator, its pod watch, the real-node driver and
  the metrics generator (stand-ins for kubelets and for the task runtime's metrics);
* :mod:`backstop_testkit.support`: harnesses for the local control plane, real nodes and
  the task runtime, test data and hypothesis strategies;
* :mod:`backstop_testkit.cases`: the topologies and workloads both the tests and the
  benchmarks build (the seeds' cases), so neither imports the other;
* :mod:`backstop_testkit.cli`: ``python -m backstop_testkit``, the development commands.

The product (``planners``, ``backstop``, ``backstop_runtime``) never imports it, and the
operator image does not contain it (``tests/unit/test_layout.py`` checks both).
"""
