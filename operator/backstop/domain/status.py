"""The StreamTopology status: what is recorded, and the conditions derived from it.

Two writers touch a topology's status: the reconcile handler (which records the
plan or the problem *before* touching pods, so a restarted operator resumes
instead of redoing work) and the readiness timer. To keep them from undoing each
other, conditions are never edited piecemeal: :func:`derive_conditions` computes
all of them from the recorded facts (``plan``, ``problem``, ``recovery``) and the
pods, so whichever writer runs last writes the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from backstop.domain import lifecycle
from backstop.domain.approval import approval_condition
from backstop.domain.conditions import build_condition, merge_conditions
from backstop.domain.planning import TopologyPlan
from planners import TaskGraph


@dataclass(frozen=True)
class PodState:
    """What the conditions need to know of one pod."""

    name: str
    task: str
    role: str
    phase: str | None
    node: str | None
    deleting: bool
    failure: str | None = None  # why its task keeps failing (see :func:`pod_failure`)


FAILING = {
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RunContainerError",
}


def pod_failure(status: Mapping[str, Any] | None) -> str | None:
    """Why a pod's task fails, from its status (a dict, camelCase as the API sends it).

    A task the runtime stops with an error (a config error, say) exits non-zero; the
    kubelet restarts it and reports ``CrashLoopBackOff`` while the pod phase stays
    ``Running``. The message is the container's termination message: with
    ``terminationMessagePolicy: FallbackToLogsOnError`` the end of the task's log.

    >>> pod_failure({"containerStatuses": [{"state": {"waiting": {
    ...     "reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 2,
    ...     "message": "error: config: count-0: missing field 'windowSeconds'"}}}]})
    "CrashLoopBackOff (exit 2): error: config: count-0: missing field 'windowSeconds'"
    >>> pod_failure({"containerStatuses": [{"state": {"running": {}}}]}) is None
    True
    """
    for cs in (status or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        ended = state.get("terminated") or {}
        if waiting.get("reason") not in FAILING and not (ended and ended.get("exitCode")):
            continue
        last = ended or (cs.get("lastState") or {}).get("terminated") or {}
        reason = waiting.get("reason") or last.get("reason") or "Error"
        code = f" (exit {last['exitCode']})" if last.get("exitCode") is not None else ""
        text = (last.get("message") or waiting.get("message") or "").strip()
        tail = text.splitlines()[-1] if text else ""
        return f"{reason}{code}" + (f": {tail[:300]}" if tail else "")
    return None


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """A :class:`PodState` from a pod dict (as the API sends it, or slimmed)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    return PodState(
        name=meta["name"],
        task=labels.get("streams.backstop.dev/task", ""),
        role=labels.get("streams.backstop.dev/role", "primary"),
        phase=status.get("phase"),
        node=(pod.get("spec") or {}).get("nodeName"),
        deleting=meta.get("deletionTimestamp") is not None,
        failure=pod_failure(status),
    )


def build_plan_status(
    generation: int,
    graph: TaskGraph,
    plan: TopologyPlan,
    *,
    replicas: Mapping[str, Iterable[str]] | None = None,
    availability: float | None = None,
) -> dict[str, Any]:
    """``status.plan``: the summary users read and the write-ahead record of the plan."""
    p = plan.placement
    out: dict[str, Any] = {
        "generation": generation,
        "algorithm": p.algorithm,
        "tasks": len(graph),
        "backupCount": len(plan.backups),
        "backups": sorted(plan.backups, key=graph.index),
        "nodesUsed": p.nodes_used,
        "worstRecoveryLatency": round(p.worst, 6),
        "bound": p.bound,
        "boundSatisfied": p.worst <= p.bound + 1e-9,
        "optimal": p.optimal,
        "assignment": dict(sorted(p.assignment.items(), key=lambda kv: graph.index(kv[0]))),
        "worstByNode": {k: round(v, 6) for k, v in plan.worst_by_node.items()},
        "moved": plan.moved,
    }
    if replicas is not None:
        out["replicas"] = {t: list(ns) for t, ns in sorted(replicas.items())}
        out["replicated"] = sorted(replicas)
        out["availability"] = availability
    return out


def expected_pods(plan: Mapping[str, Any]) -> dict[str, str]:
    """``{task-or-replica key: node}`` the recorded plan asks for."""
    want = {f"primary/{t}": n for t, n in (plan.get("assignment") or {}).items()}
    for t, nodes in (plan.get("replicas") or {}).items():
        for k, n in enumerate(nodes):
            want[f"replica-{k}/{t}"] = n
    return want


def _key(p: PodState) -> str:
    """The :func:`expected_pods` key of a pod: ``primary/<task>`` or ``replica-<k>/<task>``."""
    if p.role == "primary":
        return f"primary/{p.task}"
    return f"replica-{p.name.rsplit('-', 1)[1].removeprefix('r')}/{p.task}"  # <pod>--r<k>


def derive_conditions(
    generation: int,
    status: Mapping[str, Any],
    pods: Iterable[PodState],
) -> list[dict[str, Any]]:
    """All conditions, from the recorded facts and the pods (see the module docstring)."""
    derived = _derive_conditions(generation, status, pods)
    return lifecycle.lifecycle_conditions(generation, status, derived)


def _worst_now(plan: Mapping[str, Any]) -> str:
    """The plan's worst single-node failure as ``BoundSatisfied`` says it."""
    worst, bound = plan.get("worstRecoveryLatency", 0.0), plan.get("bound", 0.0)
    return f"worst single-node failure recovers in {worst:g}s (bound {bound:g}s)"


def _last_recovery(recovery: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    """``Recovering=False``: the last session's message is history, and says so.

    That message gives the worst recovery the session left behind ("9.5s ... bound 9s");
    after a restore brought the bound back, ``BoundSatisfied`` gave the restored value
    and the same figure under ``Recovering`` read as a current violation. So it is
    labelled as the last session's and followed by the current worst.

    >>> _last_recovery({"message": "session s1 recovered 2 tasks in 1 steps; worst "
    ...     "single-node recovery at its end 9.5s (bound 9s)", "completedAt": "T"},
    ...     {"worstRecoveryLatency": 4, "bound": 4})
    'no recovery in progress; last session (completed T): session s1 recovered 2 tasks \
in 1 steps; worst single-node recovery at its end 9.5s (bound 9s); now: worst single-node \
failure recovers in 4s (bound 4s)'
    """
    message = recovery.get("message")
    if not message:
        return "nothing to recover"
    when = recovery.get("completedAt")
    text = "no recovery in progress; last session" + (f" (completed {when})" if when else "")
    text += f": {message}"
    return text + (f"; now: {_worst_now(plan)}" if "worstRecoveryLatency" in plan else "")


def _derive_conditions(
    generation: int,
    status: Mapping[str, Any],
    pods: Iterable[PodState],
) -> list[dict[str, Any]]:
    plan = status.get("plan") or {}
    problem = status.get("problem")
    recovery = status.get("recovery") or {}
    restore = status.get("restore") or {}
    out: list[dict[str, Any]] = []
    rejected = bool(problem and problem.get("generation") == generation)
    if rejected and plan.get("assignment") is not None and plan.get("generation") != generation:
        # an edit is rejected; the pods keep following the last good plan (supervised)
        assert problem is not None
        message = (
            f"generation {generation} rejected ({problem['reason']}): {problem['message']}; "
            f"still running generation {plan.get('generation')}'s plan"
        )
        out.append(build_condition("Planned", False, problem["reason"], message, generation))
    elif rejected:
        assert problem is not None
        reason, message = problem["reason"], problem["message"]
        out.append(build_condition("Planned", False, reason, message, generation))
        out.append(
            build_condition("Placed", False, reason, "nothing placed: " + message, generation)
        )
        out.append(build_condition("BoundSatisfied", None, reason, "no plan", generation))
        out.append(build_condition("Ready", False, reason, message, generation))
        return out
    if not plan:
        out.append(build_condition("Planned", False, "Pending", "not planned yet", generation))
        out.append(build_condition("Ready", False, "Pending", "not planned yet", generation))
        return out
    current = plan.get("generation") == generation
    if not rejected:
        out.append(
            build_condition(
                "Planned",
                current,
                "PlanComputed" if current else "Replanning",
                f"{plan.get('tasks')} tasks, {plan.get('backupCount')} backups, "
                f"{plan.get('nodesUsed')} nodes ({plan.get('algorithm')})",
                generation,
            )
        )
    if recovery.get("active"):
        out.append(
            build_condition(
                "BoundSatisfied",
                None,
                "Recovering",
                "recovery in progress; the bound is re-checked after",
                generation,
            )
        )
    elif (
        restore.get("active")
        and restore.get("generation") == generation
        and restore.get("purpose", "Restore") == "Restore"
    ):
        steps = len(restore.get("steps") or [])
        out.append(
            build_condition(
                "BoundSatisfied",
                False,
                "Restoring",
                f"{_worst_now(plan)}; restore step {restore.get('issued', 0)}/{steps}: "
                f"{restore.get('message', '')}",
                generation,
            )
        )
    else:
        ok = bool(plan.get("boundSatisfied"))
        waiting = restore.get("message") if restore.get("phase") == "Waiting" and not ok else ""
        out.append(
            build_condition(
                "BoundSatisfied",
                ok,
                "WithinBound" if ok else "BoundViolated",
                _worst_now(plan) + (f"; {waiting}" if waiting else ""),
                generation,
            )
        )
    want = expected_pods(plan)
    have: dict[str, PodState] = {}
    for p in pods:
        if not p.deleting:
            have[_key(p)] = p
    missing = [k for k in want if k not in have]
    misplaced = [k for k, n in want.items() if k in have and have[k].node not in (None, n)]
    unbound = [k for k in want if k in have and have[k].node is None]
    running = [
        k for k in want if k in have and have[k].phase == "Running" and have[k].node == want[k]
    ]
    if missing or misplaced:
        out.append(
            build_condition(
                "Placed",
                False,
                "Placing",
                f"{len(missing)} pods missing, {len(misplaced)} misplaced",
                generation,
            )
        )
    elif unbound:
        out.append(
            build_condition(
                "Placed", False, "Scheduling", f"{len(unbound)} pods not bound yet", generation
            )
        )
    else:
        out.append(
            build_condition(
                "Placed",
                True,
                "AllPodsBound",
                f"{len(want)} pods on their planned nodes",
                generation,
            )
        )
    if recovery.get("active"):
        out.append(
            build_condition(
                "Recovering",
                True,
                "RecoveryInProgress",
                recovery.get("message", "recovering"),
                generation,
            )
        )
    elif "recovery" in status:
        out.append(
            build_condition(
                "Recovering", False, "NoFailure", _last_recovery(recovery, plan), generation
            )
        )
    failing = sorted(
        f"{have[k].name}: {have[k].failure}" for k in want if k in have and have[k].failure
    )
    running = [k for k in running if not have[k].failure]
    approval = (status.get("reoptimization") or {}).get("approval")
    if approval and approval.get("result"):
        out.append(approval_condition(approval, generation))
    ready = current and len(running) == len(want) and not recovery.get("active")
    out.append(
        build_condition(
            "Ready",
            ready,
            "AllTasksRunning" if ready else ("TaskFailing" if failing else "TasksStarting"),
            f"{len(running)}/{len(want)} pods running"
            + (f"; {len(failing)} failing: " + "; ".join(failing) if failing else ""),
            generation,
        )
    )
    return out


def conditions_patch(
    generation: int, status: Mapping[str, Any], pods: Iterable[PodState]
) -> list[dict[str, Any]]:
    """The merged condition list to write (transition times kept where unchanged)."""
    return merge_conditions(status.get("conditions"), derive_conditions(generation, status, pods))
