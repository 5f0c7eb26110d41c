"""What an API server's refusal says: its message, and whether a pod creation was refused
for a reason of the namespace (which no retry at once can fix) rather than of the pod.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


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
