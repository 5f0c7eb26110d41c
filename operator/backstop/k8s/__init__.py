"""The Kubernetes layer: object names and pure manifest builders, readers of Nodes and
pods, the CRDs, and the one API gateway (:mod:`backstop.k8s.kubeio`). Builds on
:mod:`backstop.domain`; never imports kopf."""
