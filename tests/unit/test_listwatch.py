"""The one list-then-watch loop (:mod:`backstop.k8s.listwatch`) behind the capacity
ledger's pod feed and the node simulator's pod view.

A fake API server answers the client's list function: listings are JSON pages,
watches are streams of JSON lines that the kubernetes client's own ``Watch``
decodes, so the client's real behaviour (a ``KeyError`` on an ERROR event when
``deserialize=False``) is what the loop is tested against. Expected values are
the events and versions the test itself scripted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from backstop.k8s.listwatch import ListWatch


def obj(name: str, version: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
    }


class Lines:
    """What the client reads a watch from: an HTTP response streamed as JSON lines."""

    status = 200

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = "".join(json.dumps(e) + "\n" for e in events).encode()

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Server:
    """Answers ``list_pods(**kwargs)``: listings from ``listings``, watches from ``watches``,
    each popped in turn; every call's arguments are kept in ``calls``."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]]]):
        self.listings, self.watches = listings, watches
        self.calls: list[dict[str, Any]] = []
        self.on_last_watch: Callable[[], object] = lambda: None

    def list_pods(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            events = self.watches.pop(0)
            if not self.watches:
                self.on_last_watch()
            return Lines(events)
        pages = self.listings[0]
        i = int(kwargs.get("_continue") or 0)
        if i + 1 >= len(pages):
            self.listings.pop(0)
        return type("Resp", (), {"data": json.dumps(pages[i]).encode()})()


def page(version: str, items: list[dict[str, Any]], more: str | None = None) -> dict[str, Any]:
    meta = {"resourceVersion": version, **({"continue": more} if more else {})}
    return {"metadata": meta, "items": items}


def collect(into: list[list[str]]) -> Any:
    def relist(items: Iterable[dict[str, Any]]) -> None:
        into.append([i["metadata"]["name"] for i in items])

    return relist


def test_the_listing_reads_pages_of_json() -> None:
    """The (re)listing reads pages of ``page`` objects as JSON, not one list of models
    (5,000 pods as models: +203 MiB): each page asked with the previous one's continue
    token, every page's objects handed on in order, the last page's version is where
    the watch starts; the selectors go to every page."""
    pods = [obj(f"p{i}", "1") for i in range(7)]
    server = Server(
        [[page("40", pods[:3], "1"), page("41", pods[3:6], "2"), page("42", pods[6:])]], []
    )
    source = ListWatch(server.list_pods, selectors={"field_selector": "spec.nodeName!="}, page=3)
    seen: list[list[str]] = []
    assert source.relist(collect(seen)) == "42"
    assert seen == [[f"p{i}" for i in range(7)]]
    assert [c.get("_continue") for c in server.calls] == [None, "1", "2"]
    assert all(c["_preload_content"] is False and c["limit"] == 3 for c in server.calls)
    assert all(c["field_selector"] == "spec.nodeName!=" for c in server.calls)


def test_events_arrive_in_order_and_a_bookmark_only_moves_the_version() -> None:
    """The API server sends a BOOKMARK about once a minute (the loop asks for them);
    its object is a bare dict with only a version. The pod feed once read it as a
    ``V1Pod``, failed and listed every pod of the cluster again each time. With
    ``deserialize=False`` the client does not track versions, so the loop resumes from
    the last event's version itself (the simulator's watch resumed from its listing's)."""
    events = [
        {"type": "ADDED", "object": obj("a", "7")},
        {"type": "MODIFIED", "object": obj("b", "8")},
        {"type": "DELETED", "object": obj("a", "9")},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "12"}}},
    ]
    server = Server([], [events])
    applied: list[tuple[str, str]] = []
    source = ListWatch(server.list_pods, watch_seconds=5)
    version = source.follow(
        "1", lambda k, o: applied.append((k, o["metadata"]["name"])), threading.Event()
    )
    assert version == "12"
    assert applied == [("ADDED", "a"), ("MODIFIED", "b"), ("DELETED", "a")]
    (call,) = server.calls
    assert call["resource_version"] == "1" and call["timeout_seconds"] == 5
    assert call["allow_watch_bookmarks"] is True and call["watch"] is True


def test_an_error_event_lists_again_and_the_watch_resumes_from_the_new_listing() -> None:
    """A watch whose version is too old gets an ERROR event (410 Gone). The client, with
    ``deserialize=False``, fails on it with a ``KeyError``; the loop must list again at
    once (no pause) and watch from the new listing's version, and a watch that simply
    timed out resumes from its last event's version without listing."""
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                        "message": "too old resource version: 5 (20)"}}  # fmt: skip
    server = Server(
        [[page("5", [obj("a", "4")])], [page("20", [obj("a", "4"), obj("b", "19")])]],
        [[{"type": "ADDED", "object": obj("b", "6")}, gone],
         [{"type": "MODIFIED", "object": obj("b", "21")}],
         [{"type": "DELETED", "object": obj("b", "22")}]],
    )  # fmt: skip
    stop = threading.Event()
    server.on_last_watch = stop.set  # the loop ends after the third watch's events
    relists: list[list[str]] = []
    applied: list[tuple[str, str]] = []
    source = ListWatch(server.list_pods, retry_after=60.0)  # a pause would outlast the join
    loop = threading.Thread(
        target=source.run,
        args=(collect(relists), lambda k, o: applied.append((k, o["metadata"]["name"])), stop),
        daemon=True,
    )
    loop.start()
    loop.join(timeout=10)
    stop.set()
    assert not loop.is_alive(), f"the loop paused or hung; calls: {server.calls}"
    assert relists == [["a"], ["a", "b"]]
    assert applied == [("ADDED", "b"), ("MODIFIED", "b")]  # the stop comes before "DELETED"
    watches = [c["resource_version"] for c in server.calls if c.get("watch")]
    assert watches == ["5", "20", "21"]
