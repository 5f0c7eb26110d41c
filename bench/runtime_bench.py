"""The real-node harness of the runtime benchmarks: deployments of the examples, on real nodes.

:class:`Bench` deploys a copy of an example (``examples/twitter-sentiment.yaml`` unless told
otherwise; ``examples/wordcount.yaml`` reads the same tweet log) on real nodes (its own tweet
log, output and node pool) with the operator as a host process, kills nodes with the test
kit's CLI and reads each task's ``status.json``. ``bench/runtime_kill.py`` (one node killed,
times from the kill: ``bench/bench_runtime_recovery.py``) and ``bench/runtime_incremental.py``
(incremental vs blocking) both run on it.

The store is an object store outside the nodes, as a cloud's S3 is outside a cluster: the
bench's own SeaweedFS on this host (:class:`~backstop_testkit.support.objectstore.ObjectStore`,
reached by the pods at this host's address). The tasks' state is under ``state/`` of its
bucket (``spec.store.objectStore``, endpoint and credentials from a Secret in the bench's
namespace); each topology's tweet log and sinks' output under ``<topology name>/``. No task
pod mounts a host directory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backstop.domain.constants import GROUP, VERSION
from backstop.k8s.cluster import api_client
from backstop_runtime.blobs import Blobs, open_blobs
from backstop_runtime.output import committed, round_key
from backstop_testkit.support.catchup import caught_up, steady_lags
from backstop_testkit.support.objectstore import ObjectStore
from backstop_testkit.support.runtime_data import bucket_manifest, follow_tweets

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"
POOL = "bench.backstop.dev/pool"
STATE, SECRET = "state", "bench-object-store"  # the tasks' key prefix and the store's Secret
NO_NODE_LOCAL = {"BACKSTOP_ALLOW_NODE_LOCAL_STORE": "false"}
"""The operator's environment: no single-host allowance, as on a cluster of real machines."""
UNBOUNDED = 86400.0  # the largest bound the CRD accepts: in effect none


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait(what: str, cond: Any, timeout: float, interval: float = 0.2) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(ApiException):
            got = cond()
            if got:
                return got
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


class Bench:
    """One namespace, its object store and the topologies deployed there; ``run`` holds the
    store's files (``<namespace>-objectstore/``) and the tweet generators' logs."""

    def __init__(
        self, kubeconfig: str, run: Path, rate: float, warmup: float, show: bool = False
    ) -> None:
        self.kubeconfig, self.rate, self.warmup, self.show = kubeconfig, rate, warmup, show
        self.kube = api_client(kubeconfig)
        self.core = client.CoreV1Api(self.kube)
        self.custom = client.CustomObjectsApi(self.kube)
        self.ns = f"bench-{uuid.uuid4().hex[:6]}"
        self.run = run
        self.objects = ObjectStore(run / f"{self.ns}-objectstore", for_pods=True)
        self.s3: dict[str, str] = {}  # BACKSTOP_S3_ENDPOINT, AWS_*, BACKSTOP_S3_BUCKET
        self._state: Blobs | None = None
        self.nodes: list[str] = []
        self.steady: dict[str, float] = {}
        self.uids: dict[str, str] = {}  # of the topologies created

    @property
    def bucket(self) -> str:
        """``s3://<bucket>`` of the store."""
        return f"s3://{self.s3['BACKSTOP_S3_BUCKET']}"

    @property
    def endpoint(self) -> str:
        """The store's S3 endpoint: this host's address, which the pods reach."""
        return self.s3["BACKSTOP_S3_ENDPOINT"]

    @property
    def state(self) -> Blobs:
        """The tasks' state in the bucket (``spec.store``), opened once by :meth:`store_up`."""
        if self._state is None:
            raise RuntimeError("the object store is not up: call Bench.store_up first")
        return self._state

    def store_up(self) -> None:
        """Start the object store and write the Secret the topologies' ``spec.store`` names
        (the endpoint and credentials) into the namespace, which must exist."""
        self.s3 = self.objects.up()
        self._state = open_blobs(f"{self.bucket}/{STATE}", self.s3)
        data = {
            "endpoint": self.endpoint,
            "accessKeyId": self.s3["AWS_ACCESS_KEY_ID"],
            "secretAccessKey": self.s3["AWS_SECRET_ACCESS_KEY"],
        }
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=SECRET), string_data=data)
        self.core.create_namespaced_secret(self.ns, body)
        log(f"object store {self.endpoint} (bucket {self.bucket}), Secret {self.ns}/{SECRET}")

    def store_down(self) -> None:
        """Stop the object store by its pid and remove its data (its log stays in ``run``)."""
        self.objects.down()
        shutil.rmtree(self.objects.run / "data", ignore_errors=True)

    def status(self, name: str, task: str) -> dict[str, Any]:
        """The task's ``status.json``, key ``<namespace>/<name>/<uid>/tasks/<task>/`` under
        ``state/`` (``TaskConfig.root``); ``{}`` until the task writes it."""
        uid = self.uids.get(name, "-")
        raw = self.state.get(f"{self.ns}/{name}/{uid}/tasks/{task}/status.json")
        try:
            doc = json.loads(raw) if raw is not None else {}
        except json.JSONDecodeError:
            return {}
        return dict(doc) if isinstance(doc, dict) else {}

    def last_line(self, name: str) -> str:
        """The last committed line of the topology's ``sink`` (its newest object that has
        one), without reading every object of the run."""
        out = open_blobs(f"{self.bucket}/{name}/output", self.s3)
        for task, r in reversed(committed(out)):
            lines = (out.get(round_key(task, r)) or b"").decode("utf-8").splitlines()
            if lines:
                return lines[-1]
        return ""

    def tuples(self, name: str) -> dict[str, float]:
        """``tuples_in_total`` of every running task, from its ``/metrics`` (pod IP, port 9090)."""
        out: dict[str, float] = {}
        for pod in self.core.list_namespaced_pod(
            self.ns, label_selector=f"{GROUP}/topology={name}"
        ).items:
            if pod.status.phase != "Running" or not pod.status.pod_ip:
                continue
            with contextlib.suppress(OSError):
                url = f"http://{pod.status.pod_ip}:9090/metrics"
                text = urllib.request.urlopen(url, timeout=2).read().decode()
                for line in text.splitlines():
                    if line.startswith("backstop_task_tuples_in_total"):
                        out[pod.metadata.labels[f"{GROUP}/task"]] = float(line.rsplit(" ", 1)[1])
        return out

    def flowing(self, name: str, when: str, seconds: float = 3.0) -> None:
        """Print the records each task took in over ``seconds`` (the demo shows them)."""
        before = self.tuples(name)
        time.sleep(seconds)  # a rate needs an interval
        after = self.tuples(name)
        rates = {t: (after[t] - before[t]) / seconds for t in after if t in before}
        last = self.last_line(name)
        print(f"records flowing {when} (tuples in per second, from each task's /metrics):")
        print("  " + ", ".join(f"{t} {r:.0f}" for t, r in sorted(rates.items())))
        if last:
            print(f"  latest sink line: {last[:150]}")
        sys.stdout.flush()

    def cli(self, *args: str) -> None:
        """Run a command of the test kit's CLI (``python -m backstop_testkit``) on the cluster."""
        subprocess.run(
            [sys.executable, "-m", "backstop_testkit", *args, "--kubeconfig", self.kubeconfig],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def manifest(self, name: str, bound: float | None, example: Path = EXAMPLE) -> dict[str, Any]:
        """A copy of ``example`` as ``name``: the bench's store, its own input and output
        paths in the bucket, its node pool, a 2 s grace period (``bound``: another
        ``recoveryLatencyBound``)."""
        bucket, pool = self.s3["BACKSTOP_S3_BUCKET"], {POOL: self.nodes[0]}
        doc = bucket_manifest(example, name, bucket, (STATE, SECRET), pool)
        doc["spec"]["recovery"]["replanOnViolation"] = False
        if bound is not None:
            doc["spec"]["recoveryLatencyBound"] = bound
        return doc

    def start(
        self, name: str, doc: dict[str, Any]
    ) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
        """Deploy ``doc`` with its own tweet log appended at the steady rate; return the plan
        (once every task has caught up with its input and a warm-up passed) and the generator
        (stopped here if this fails: the caller gets none to stop)."""
        gen = self.tweets(name)
        try:
            return self._started(name, doc, gen), gen
        except BaseException:
            gen.terminate()
            gen.wait()
            raise

    def tweets_log(self, name: str) -> Path:
        """Where the tweet generator of topology ``name`` writes its errors."""
        return self.run / f"{self.ns}-{name}-tweets.log"

    def tweets(self, name: str) -> subprocess.Popen[bytes]:
        """The topology's tweet log, ``<bucket>/<name>/input``: one new segment per partition
        each second at the bench's rate, for up to an hour (its errors in :meth:`tweets_log`)."""
        location = f"{self.bucket}/{name}/input"
        return follow_tweets(location, self.s3, self.rate, 3600, self.tweets_log(name))

    def _started(
        self, name: str, doc: dict[str, Any], gen: subprocess.Popen[bytes]
    ) -> dict[str, Any]:
        """Create the topology; its plan once every task caught up and the warm-up passed
        (each task's median lag in it into :attr:`steady`)."""
        created = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, "streamtopologies", doc
        )
        self.uids[name] = created["metadata"]["uid"]

        def plan() -> dict[str, Any] | None:
            st = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.ns, "streamtopologies", name
            )
            p = (st.get("status") or {}).get("plan") or {}
            return p if p.get("assignment") else None

        p: dict[str, Any] = wait(f"{name}: a plan", plan, 120)
        tasks = list(p["assignment"])

        def steady() -> bool:
            if gen.poll() is not None:
                why = f"exited ({gen.returncode}), see {self.tweets_log(name)}"
                raise SystemExit(f"{name}: the tweet generator {why}")
            return all(self.status(name, t).get("recoverySeconds") is not None for t in tasks)

        wait(f"{name}: every task caught up with its input", steady, 240)
        log(f"{name}: all {len(tasks)} tasks caught up; steady for {self.warmup:.0f}s")
        # a steady stream before the failure, and each task's median lag in it
        self.steady = steady_lags(functools.partial(self.status, name), tasks, self.warmup)
        return p

    def caught_up(self, name: str, task: str, epoch: int, seen: dict[str, int]) -> bool:
        """The new copy of ``task`` is back where it was before the failure
        (:func:`~backstop_testkit.support.catchup.caught_up`, against its steady lag)."""
        s = self.status(name, task)
        return caught_up(s, task, epoch, self.steady.get(task, 0.0), seen)

    def recovery_plan_seen(self, name: str) -> bool:
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.ns, "recoveryplans", label_selector=f"{GROUP}/topology={name}"
        )["items"]
        return bool(items)

    def session_seen(self, name: str) -> bool:
        """A recovery session recorded (``status.recovery``) or a RecoveryPlan issued."""
        st = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "streamtopologies", name
        )
        rec = (st.get("status") or {}).get("recovery") or {}
        return bool(rec.get("active") and rec.get("session")) or self.recovery_plan_seen(name)

    def delete(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.ns, "streamtopologies", name
            )

        def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.ns, "streamtopologies", name
                )
            except ApiException as err:
                return bool(err.status == 404)
            return False

        wait(f"{name} deleted", gone, 120)
        wait(
            f"the pods of {name} gone",
            lambda: (
                not self.core.list_namespaced_pod(
                    self.ns, label_selector=f"{GROUP}/topology={name}"
                ).items
            ),
            120,
        )
