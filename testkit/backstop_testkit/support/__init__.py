"""Harnesses for the tests and benchmarks: the local control plane and the operator process
(:mod:`.kubetools`), real nodes (:mod:`.realnodes`), the task runtime run locally
(:mod:`.runtime_harness`, :mod:`.runtime_data`) and hypothesis strategies (:mod:`.strategies`)."""
