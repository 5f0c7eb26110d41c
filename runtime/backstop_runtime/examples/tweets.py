"""A synthetic, replayable tweet log for ``examples/twitter-sentiment.yaml``.

``python -m backstop_runtime.examples.tweets OUT --partitions 2 --rate 200 --seconds 60``
writes ``OUT/part-<k>.jsonl`` with lines ``{"id", "ts", "user", "text"}``: event time
advances by ``1/rate`` per tweet, hashtags follow a skewed popularity (so some topics are
hot), and the words carry sentiment VADER recognises. ``--follow`` appends in real time
(``--rate`` tweets per second in all), so the topology streams as the log grows. Seeded:
the same arguments give the same log.

``OUT`` may be ``s3://bucket/prefix`` (or a folder with ``--segments``): then each second of
tweets is a new immutable segment per partition, ``OUT/seg-<second>-p<k>.jsonl``, names
sorting in time order (:mod:`backstop_runtime.input`); with ``--follow``, one per second.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

from backstop_runtime.blobs import open_blobs
from backstop_runtime.input import put_segment, segment_name

TOPICS = ["worldcup", "election", "climate", "ai", "music", "movies", "space", "food"]
POSITIVE = ["love", "great", "amazing", "happy", "wonderful", "best", "good", "win"]
NEGATIVE = ["hate", "awful", "terrible", "sad", "worst", "bad", "angry", "lose"]
NEUTRAL = ["today", "the", "match", "news", "people", "city", "new", "watch", "again"]


def tweet(rng: random.Random, i: int, ts: float) -> dict[str, object]:
    weights = [1.0 / (k + 1) for k in range(len(TOPICS))]
    tags = {rng.choices(TOPICS, weights)[0] for _ in range(rng.randint(1, 2))}
    mood = rng.choice([POSITIVE, NEGATIVE, NEUTRAL])
    words = [rng.choice(mood if rng.random() < 0.5 else NEUTRAL) for _ in range(rng.randint(3, 9))]
    text = " ".join(words) + " " + " ".join(f"#{t}" for t in sorted(tags))
    return {"id": f"t{i}", "ts": round(ts, 3), "user": f"u{rng.randint(1, 500)}", "text": text}


def write_files(args: argparse.Namespace, rng: random.Random) -> None:
    """Append the tweets to ``OUT/part-<k>.jsonl`` (in real time with ``--follow``)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = [(out / f"part-{k:02d}.jsonl").open("a") for k in range(args.partitions)]
    began = time.monotonic()
    try:
        for i in range(int(args.rate * args.seconds)):
            ts = args.start + i / args.rate
            files[i % args.partitions].write(json.dumps(tweet(rng, i, ts)) + "\n")
            if args.follow:
                files[i % args.partitions].flush()
                ahead = began + i / args.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
    finally:
        for f in files:
            f.close()


def write_segments(args: argparse.Namespace, rng: random.Random) -> None:
    """Write each second of tweets as one new segment per partition,
    ``seg-<second>-p<k>.jsonl`` (:func:`backstop_runtime.input.segment_name`), at the end
    of that second with ``--follow``."""
    blobs = open_blobs(args.out)
    total = int(args.rate * args.seconds)
    began = time.monotonic()
    i = 0
    for second in range(math.ceil(args.seconds)):
        parts: list[list[str]] = [[] for _ in range(args.partitions)]
        while i < total and i < (second + 1) * args.rate:
            ts = args.start + i / args.rate
            parts[i % args.partitions].append(json.dumps(tweet(rng, i, ts)) + "\n")
            i += 1
        if args.follow:
            time.sleep(max(0.0, began + second + 1 - time.monotonic()))
        for k, lines in enumerate(parts):
            if lines:
                name = segment_name(int(args.start) + second, k)  # a later --start: new names
                put_segment(blobs, name, "".join(lines).encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder for part-<k>.jsonl, or s3://bucket/prefix for segments")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--rate", type=float, default=200.0, help="tweets per second, in all")
    p.add_argument("--seconds", type=float, default=60.0, help="event time covered")
    p.add_argument("--start", type=float, default=0.0, help="event time of the first tweet")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--follow", action="store_true", help="write in real time")
    p.add_argument(
        "--segments", action="store_true", help="write segments into a folder too (as s3://)"
    )
    args = p.parse_args(argv)
    if args.partitions < 1 or args.rate <= 0 or args.seconds <= 0:
        p.error("--partitions, --rate and --seconds must be positive")
    rng = random.Random(args.seed)
    if args.segments or args.out.startswith("s3://"):
        write_segments(args, rng)
    else:
        write_files(args, rng)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
