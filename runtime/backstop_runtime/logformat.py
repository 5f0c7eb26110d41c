"""How the task logs: plain lines by default, or one JSON object per line.

``BACKSTOP_LOG_FORMAT=json`` (a runtime setting a pod template may set) makes every record
one JSON object on stderr, for log pipelines (Loki, Elasticsearch, Cloud Logging) that parse
fields instead of lines: ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``,
``task`` (the copy: ``<task>`` or ``<task>#r<k>``), ``message``, and ``exception`` (the
traceback) when there is one. Anything else is ``text``: ``time level logger: message``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring).

    >>> rec = logging.LogRecord("backstop_runtime.task", logging.INFO, "f", 1,
    ...                         "restored round %d", (7,), None)
    >>> rec.created = 0.25
    >>> JsonFormatter("count-0").format(rec)
    '{"time":"1970-01-01T00:00:00.250Z","level":"INFO","logger":"backstop_runtime.task",\
"task":"count-0","message":"restored round 7"}'
    """

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task = task

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc = {
            "time": f"{stamp}.{int(record.created * 1000) % 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "task": self.task,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def configure(environ: dict[str, str] | None = None) -> None:
    """Set up the root logger from ``BACKSTOP_LOG_LEVEL`` and ``BACKSTOP_LOG_FORMAT``."""
    env = os.environ if environ is None else environ
    handler = logging.StreamHandler(sys.stderr)
    if env.get("BACKSTOP_LOG_FORMAT", "text").strip().lower() == "json":
        task = env.get("BACKSTOP_TASK_ID", "")
        if env.get("BACKSTOP_ROLE") == "replica":
            task += f"#r{env.get('BACKSTOP_REPLICA', '0')}"
        handler.setFormatter(JsonFormatter(task))
    else:
        handler.setFormatter(logging.Formatter(TEXT))
    logging.basicConfig(level=env.get("BACKSTOP_LOG_LEVEL", "INFO"), handlers=[handler])
