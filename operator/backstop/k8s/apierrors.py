"""What an API server's refusal says: its message, and whether a pod creation was refused
for a reason of the namespace (which no retry at once can fix) rather than of the pod.

:func:`refusal_record` is how such a refusal is recorded in ``status.podsRefused``, by the
reconcile and the supervise daemon alike.
"""

from __future__ import annotations

import json
import time

from kubernetes.client.exceptions import ApiException

from backstop.domain.status import PodsRefusedStatus, now_rfc3339


class PodRefused(ApiException):  # type: ignore[misc]  # the client's classes are untyped
    """The API server refuses to create a task pod for a reason of the namespace, not of
    the pod: 403 Forbidden (Pod Security admission, a ResourceQuota, a missing
    ServiceAccount) or a 404 naming the ServiceAccount. Retrying at once cannot help;
    someone has to change the namespace. ``message`` is the API server's own."""

    def __init__(self, err: ApiException, message: str) -> None:
        super().__init__(status=err.status, reason=err.reason)
        self.body = err.body
        self.headers = err.headers
        self.message = message


def api_message(err: ApiException) -> str:
    """The ``message`` of the API server's ``Status`` answer (else its body or reason).

    >>> api_message(ApiException(status=403, reason="Forbidden"))
    'Forbidden'
    """
    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        return str(err.body or err.reason)
    found = body.get("message") if isinstance(body, dict) else None
    return str(found or err.reason)


def pod_refusal(err: ApiException) -> PodRefused | None:
    """``err`` of a pod creation as a :class:`PodRefused`, when it is one (else ``None``).

    A 404 counts only when it names a ServiceAccount (``details.kind``): a 404 for the
    namespace means the topology is being deleted with it.
    """
    if err.status == 403:
        return PodRefused(err, api_message(err))
    if err.status == 404:
        try:
            details = json.loads(err.body or "{}").get("details") or {}
        except (ValueError, AttributeError):
            return None
        if details.get("kind") in ("serviceaccounts", "serviceaccount"):
            return PodRefused(err, api_message(err))
    return None


def refusal_record(
    old: PodsRefusedStatus | None, err: PodRefused, now: float | None = None
) -> tuple[PodsRefusedStatus, str | None]:
    """``status.podsRefused`` after the refusal ``err`` (``old``: the record so far), with
    its next attempt (:meth:`PodsRefusedStatus.retry_delay` after ``now``: each attempt
    doubles the delay, as only a change of the namespace helps), and the text of the
    Warning Event ``PodsRefused`` to post: ``None`` unless the refusal is new or says
    something new.

    >>> err = PodRefused(ApiException(status=403, reason="Forbidden"), "exceeded quota: q")
    >>> rec, text = refusal_record(None, err, now=100.0)
    >>> rec.attempts, rec.retry_at, text
    (1, 105.0, 'the API server refuses the task pods (403 Forbidden): exceeded quota: q')
    >>> again, text = refusal_record(rec, err, now=105.0)
    >>> again.attempts, again.retry_at, again.since == rec.since, text
    (2, 115.0, True, None)
    """
    reason = str(err.reason or "")
    rec = PodsRefusedStatus(
        code=int(err.status or 0),
        reason=reason,
        message=err.message,
        since=old.since if old is not None else now_rfc3339(),
        attempts=old.attempts + 1 if old is not None else 1,
    )
    now = time.time() if now is None else now
    rec = rec.model_copy(update={"retry_at": round(now + rec.retry_delay(), 3)})
    if old is not None and (old.code, old.message) == (rec.code, rec.message):
        return rec, None
    return rec, f"the API server refuses the task pods ({rec.code} {reason}): {err.message}"
