#!/bin/bash
# The Spark image's entrypoint (operator/Dockerfile.spark), after tini.
#
# `executor` is what Spark's Kubernetes scheduler runs in every executor pod it starts
# (`--master k8s://...`: the Job's pod is the driver, in client mode, and asks for executor
# pods from this same image); it starts Spark's executor backend from pyspark's own jars with
# the settings the driver put in the pod's environment, as the entrypoint.sh of Apache Spark's
# images does. Anything else is the backstop command line (`operator --all-namespaces`, ...).
set -euo pipefail
if [[ ${1:-} == executor ]]; then
  spark_home=$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
  opts=()
  # SPARK_JAVA_OPT_0, _1, ...: the executor's JVM options, in their order
  while IFS= read -r name; do opts+=("${!name}"); done < <(
    env | sed -n 's/^\(SPARK_JAVA_OPT_[0-9]*\)=.*/\1/p' | sort -t_ -k4 -n)
  exec "${JAVA_HOME:-/usr}/bin/java" "${opts[@]}" \
    -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
    -cp "$spark_home/jars/*" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "$SPARK_EXECUTOR_POD_NAME"
fi
exec /opt/venv/bin/backstop "$@"
