"""A synthetic, replayable tweet log for ``examples/twitter-sentiment.yaml``.

``python -m backstop_runtime.examples.tweets OUT --partitions 2 --rate 200 --seconds 60``
writes ``OUT/part-<k>.jsonl`` with lines ``{"id", "ts", "user", "text"}``: event time
advances by ``1/rate`` per tweet, hashtags follow a skewed popularity (so some topics are
hot), and the words carry sentiment VADER recognises. ``--follow`` appends in real time
(``--rate`` tweets per second in all), so the topology streams as the log grows. Seeded:
the same arguments give the same log.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for part-<k>.jsonl")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--rate", type=float, default=200.0, help="tweets per second, in all")
    p.add_argument("--seconds", type=float, default=60.0, help="event time covered")
    p.add_argument("--start", type=float, default=0.0, help="event time of the first tweet")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--follow", action="store_true", help="append in real time")
    args = p.parse_args(argv)
    if args.partitions < 1 or args.rate <= 0 or args.seconds <= 0:
        p.error("--partitions, --rate and --seconds must be positive")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    files = [(args.out / f"part-{k:02d}.jsonl").open("a") for k in range(args.partitions)]
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
