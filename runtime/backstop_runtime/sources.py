"""The replayable partitioned log source: JSONL segment files under ``config.path``.

Source task ``i`` of ``n`` reads the files (sorted by path) whose position ``k`` has
``k % n == i``; files that appear later join in that order. Its position is a byte offset
per file, which is all a replay needs. Lines that are not JSON objects, or lack a field
the config requires, or whose event time is not a number, are counted and kept aside in
the task's dead-letter file with the reason, file and offset; they are never dropped.

Config: ``path`` (required), ``bounded`` (stop at the end of the files, default false),
``timestampField`` (default ``ts``), ``keyField``, ``requiredFields`` (list),
``maxDelaySeconds`` (allowed disorder of event time within a file, default 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from backstop_runtime.api import Context, Record, Source
from backstop_runtime.config import ConfigError, require

INF = float("inf")


class JsonlSource(Source):
    """Reads ``*.jsonl`` under ``config.path``; position = byte offset per file."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.root = Path(require(config, "path"))
        self.bounded = bool(config.get("bounded", False))
        self.ts_field = str(config.get("timestampField", "ts"))
        self.key_field = config.get("keyField")
        required = config.get("requiredFields", [])
        if not isinstance(required, list):
            raise ConfigError("config.requiredFields must be a list of field names")
        self.required = [str(f) for f in required]
        self.max_delay = float(config.get("maxDelaySeconds", 0.0))
        self.offsets: dict[str, int] = {}
        self.max_ts: dict[str, float] = {}
        self.handles: dict[str, BinaryIO] = {}
        self.ctx: Context | None = None

    def open(self, ctx: Context) -> None:
        self.ctx = ctx
        if not self.root.is_dir():
            raise ConfigError(f"config.path {self.root} is not a directory")

    def _files(self) -> list[str]:
        names = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*.jsonl"))
        assert self.ctx is not None
        mine = [n for k, n in enumerate(names) if k % self.ctx.parallelism == self.ctx.index]
        for n in mine:
            self.offsets.setdefault(n, 0)
        return mine

    def _handle(self, name: str) -> BinaryIO:
        if name not in self.handles:
            self.handles[name] = (self.root / name).open("rb")
        return self.handles[name]

    def read(self, max_records: int, until: Any = None) -> list[Record]:
        files = self._files() if until is None else sorted(until["offsets"])
        limits = None if until is None else {k: int(v) for k, v in until["offsets"].items()}
        share = max(1, math.ceil(max_records / max(1, len(files))))
        out: list[Record] = []
        for name in files:
            self.offsets.setdefault(name, 0)
            stop = None if limits is None else limits[name]
            f = self._handle(name)
            f.seek(self.offsets[name])
            taken = 0
            while taken < share and (stop is None or self.offsets[name] < stop):
                line = f.readline()
                if not line or (not line.endswith(b"\n") and not self._final(name, line)):
                    break  # a line still being written: read it next time
                offset = self.offsets[name]
                self.offsets[name] += len(line)
                rec = self._parse(name, offset, line)
                if rec is not None:
                    out.append(rec)
                    taken += 1
        return out

    def _final(self, name: str, line: bytes) -> bool:
        """In a bounded log an unterminated last line is complete."""
        return self.bounded and self.offsets[name] + len(line) == (self.root / name).stat().st_size

    def _parse(self, name: str, offset: int, line: bytes) -> Record | None:
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        if not text.strip():
            return None
        reason = None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            obj, reason = None, f"not JSON: {err.msg}"
        if reason is None and not isinstance(obj, dict):
            reason = "not a JSON object"
        if reason is None:
            missing = [f for f in self.required if f not in obj]
            if missing:
                reason = "missing field(s) " + ", ".join(missing)
        ts: float | None = None
        if reason is None and self.ts_field in obj:
            raw = obj[self.ts_field]
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
                reason = f"{self.ts_field} is not a finite number"
            else:
                ts = float(raw)
        if reason is not None:
            assert self.ctx is not None
            self.ctx.dead_letter(reason, {"file": name, "offset": offset, "line": text})
            return None
        if ts is not None:
            self.max_ts[name] = max(self.max_ts.get(name, -INF), ts)
        key = obj.get(self.key_field) if self.key_field else None
        return Record(obj, None if key is None else str(key), ts)

    def watermark(self) -> float:
        files = list(self.offsets)
        if not files:
            return -INF
        return min(self.max_ts.get(n, -INF) for n in files) - self.max_delay

    def at_end(self) -> bool:
        if not self.bounded:
            return False
        files = self._files()
        return all(self.offsets[n] >= (self.root / n).stat().st_size for n in files)

    def caught_up(self) -> bool:
        files = self._files()
        return all(self.offsets[n] >= (self.root / n).stat().st_size for n in files)

    def snapshot(self) -> Any:
        return {"offsets": dict(self.offsets), "maxTs": dict(self.max_ts)}

    def restore(self, state: Any) -> None:
        self.offsets = {k: int(v) for k, v in state["offsets"].items()}
        self.max_ts = {k: float(v) for k, v in state["maxTs"].items()}
