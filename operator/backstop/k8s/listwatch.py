"""List, then watch from there: the one loop behind every cache of pods that Backstop keeps.

Both the operator's capacity ledger (:mod:`backstop.k8s.podfeed`) and the node
simulator's view of bound pods (:mod:`backstop_testkit.sim.podwatch`) follow the same
pattern, and it has traps enough to be written once:

* the objects stay JSON dicts (``deserialize=False`` and ``_preload_content=False``):
  ``V1Pod`` models cost several times the JSON's size;
* the (re)listing reads pages of ``page`` objects, so its peak memory is one page;
* with ``deserialize=False`` the client never advances ``Watch.resource_version``
  (it reads it only from models), so the loop keeps the version of the last event
  itself, a BOOKMARK included, and resumes from that one;
* an ERROR event (typically 410 Gone: the version is too old) makes the client
  itself fail with a ``KeyError`` (it reads ``event['raw_object']``, which only its
  deserializing path sets); that, an ``ApiException`` 410, or an ERROR event that
  gets through all mean "list again", at once;
* any other error (a reset, a restarting API server) lists again after a pause,
  and the loop never dies while ``stop`` is unset.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("backstop.listwatch")

Relist = Callable[[Iterable[dict[str, Any]]], None]
"""Takes every object of a fresh listing (must consume them all) and replaces the cache."""
Apply = Callable[[str, dict[str, Any]], None]
"""Takes one watch event: its type (ADDED, MODIFIED, DELETED) and its object."""


@dataclass
class ListWatch:
    """How to list and watch one kind of object, e.g. every pod of the cluster.

    ``call`` is the client's list function (``CoreV1Api.list_pod_for_all_namespaces``);
    ``selectors`` go to both the listing and the watch (``field_selector=...``).
    """

    call: Callable[..., Any]
    selectors: dict[str, Any] = field(default_factory=dict)
    watch_seconds: int = 300
    """Server-side timeout of one watch request; it is then resumed from the last version."""
    page: int = 500
    """Objects per page of the (re)listing."""
    retry_after: float = 1.0
    """Pause after an error other than "too old" before listing again."""
    bookmarks: bool = True

    def pages(self) -> Iterator[dict[str, Any]]:
        """The pages of one consistent LIST, as JSON dicts."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            resp = self.call(_preload_content=False, **self.selectors, **kwargs)
            page: dict[str, Any] = json.loads(resp.data)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def relist(self, relist: Relist) -> str:
        """Hand every listed object to ``relist``; the version to watch from."""
        version: str | None = None

        def items() -> Iterator[dict[str, Any]]:
            nonlocal version
            for page in self.pages():
                yield from page.get("items") or []
                version = str((page.get("metadata") or {}).get("resourceVersion") or "")

        relist(items())
        if version is None:
            raise RuntimeError("relist callback did not consume the listing")
        return version

    def follow(self, version: str, apply: Apply, stop: threading.Event) -> str | None:
        """Watch from ``version`` until the request times out or ``stop``; the version to
        resume from, or None when the watch lost its place (list again)."""
        w = watch.Watch()
        events = w.stream(
            self.call,
            resource_version=version,
            timeout_seconds=self.watch_seconds,
            allow_watch_bookmarks=self.bookmarks,
            deserialize=False,
            **self.selectors,
        )
        while True:
            try:
                event = next(events)
            except StopIteration:
                return version
            except KeyError:  # the client's own failure on an ERROR event (see above)
                log.info("watch of %s: ERROR event; listing again", _name(self.call))
                return None
            if stop.is_set():
                w.stop()
                return version
            kind, obj = event.get("type"), event.get("object")
            if kind == "ERROR" or not isinstance(obj, dict):
                log.info("watch of %s: %s; listing again", _name(self.call), str(obj)[:200])
                return None
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":  # a BOOKMARK carries only the version
                apply(str(kind), obj)

    def run(self, relist: Relist, apply: Apply, stop: threading.Event) -> None:
        """List, then watch from there, until ``stop``; list again whenever needed."""
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self.relist(relist)
                version = self.follow(version, apply, stop)
            except ApiException as err:
                version = None
                if err.status != 410:  # 410: too old, list again at once
                    log.warning(
                        "watch of %s: %s %s; retrying", _name(self.call), err.status, err.reason
                    )
                    stop.wait(self.retry_after)
            except Exception as err:  # network trouble: never let the loop die
                log.warning("watch of %s: %s; retrying", _name(self.call), str(err)[:200])
                version = None
                stop.wait(self.retry_after)


def _name(call: Callable[..., Any]) -> str:
    return getattr(call, "__name__", "objects")
