"""The pure domain: the StreamTopology spec, status builders, planning, recovery and
re-optimization decisions. Imports only ``planners``, pydantic and the standard library
(plus pandas/numpy for the estimates); never kubernetes, kopf or pyspark."""
