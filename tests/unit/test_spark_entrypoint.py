"""The Spark image's entrypoint starts an executor the way Spark's Kubernetes scheduler asks.

Spark's Kubernetes scheduler (``--master k8s://…``) starts executor pods from the driver's
image with the single argument ``executor`` and the executor's settings in the environment;
the image's entrypoint must turn that into Spark's executor backend. A fake ``java`` prints
the command line it got, so the test sees exactly what the pod would run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "operator" / "spark-entrypoint.sh"


def test_executor_runs_sparks_kubernetes_executor_backend_with_the_drivers_settings(
    tmp_path: Path,
) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    java.chmod(0o755)
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "JAVA_HOME": str(tmp_path),
        # the order is the number's, not the names' (10 after 2)
        "SPARK_JAVA_OPT_10": "-Dspark.c=3",
        "SPARK_JAVA_OPT_0": "-Dspark.a=1",
        "SPARK_JAVA_OPT_2": "-Dspark.b=with space",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.1.2.3:7078",
        "SPARK_EXECUTOR_ID": "2",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.9",
        "SPARK_EXECUTOR_POD_NAME": "backstop-exec-2",
    }
    out = subprocess.run(
        ["bash", str(SCRIPT), "executor"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    jars = Path(pyspark.__file__).parent / "jars"
    assert out == [
        "-Dspark.a=1", "-Dspark.b=with space", "-Dspark.c=3",
        "-Xms512m", "-Xmx512m", "-cp", f"{jars}/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@10.1.2.3:7078",
        "--executor-id", "2", "--cores", "1", "--app-id", "spark-app-1",
        "--hostname", "10.1.2.9", "--resourceProfileId", "0", "--podName", "backstop-exec-2",
    ]  # fmt: skip
    # the class is in pyspark's jars (what the image has: no separate Spark distribution)
    assert list(jars.glob("spark-kubernetes_*.jar"))
