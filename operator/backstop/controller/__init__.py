"""The Kopf controller: handlers and per-topology workers that read the cluster, decide with the
domain and write through the Kubernetes layer. Configuration is read once
(:mod:`backstop.controller.settings`); per-topology state lives in Kopf's memo
(:mod:`backstop.controller.memo`)."""
