"""The word count as one Apache Flink SQL job, run by ``bench_wordcount_flink.py``.

Runs in its own virtual environment (PyFlink and its JVM, not the project's):
``python flinkjob.py IN OUT SPAN CHECKPOINTS`` reads every JSON line ``{"id", "ts",
"text"}`` of the files under ``IN``, counts the lowercase words per 10-second tumbling
event-time window with parallelism 2 and a checkpoint every 2 s (to files under
``CHECKPOINTS``: the job manager's memory takes at most 5 MB of state), writes
``{"window_start", "word", "cnt"}`` lines under ``OUT``, and prints one JSON line: the
job's own run time (``netRuntimeMs``, from submission to its end, as Flink's job result
reports it). PyFlink starts its JVM (the local MiniCluster) as a child of this process;
the job is pure SQL, so no Python worker runs beside it. A failure ends the job (no
restart), so that the bench fails with it.

Event time: Flink's file source hands a reader one file after another and a reader's
watermark never goes back, so a file read after a later one would be late; the watermark
is held ``SPAN`` seconds (the input's event-time span) behind, and every window closes at
the end of the input. Words: Java's ``\\p{L}+`` on the lowercased text, the runs of
letters of any alphabet (Unicode's L categories, what Python's ``str.isalpha`` and the
reference count take), as the Python word count's ``[^\\W\\d_]+``; Java's ``\\W`` is
ASCII-only without a flag, so that pattern would split ``délta``. The two differ on the
numerals Python's ``\\w`` also takes (Unicode No and Nl: ``²``, ``½``, ``Ⅻ``), which the
generated input does not hold.
"""

from __future__ import annotations

import json
import sys

from pyflink.table import EnvironmentSettings, TableEnvironment  # type: ignore[import-not-found]

WORD = r"\p{L}+"
"""Java regular expression of a word: a run of letters of any alphabet."""


def statements(inp: str, out: str, span: float) -> list[str]:
    """The job's SQL: the source and sink tables, then the windowed count."""
    days, rest = divmod(int(span) + 10, 86400)
    delay = f"{days} {rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return [
        f"""CREATE TABLE src (
              id STRING, ts DOUBLE, `text` STRING,
              et AS TO_TIMESTAMP_LTZ(CAST(ts * 1000 AS BIGINT), 3),
              WATERMARK FOR et AS et - INTERVAL '{delay}' DAY TO SECOND
            ) WITH ('connector' = 'filesystem', 'path' = 'file://{inp}', 'format' = 'json')""",
        f"""CREATE TABLE sink (window_start TIMESTAMP_LTZ(3), word STRING, cnt BIGINT)
            WITH ('connector' = 'filesystem', 'path' = 'file://{out}', 'format' = 'json')""",
        f"""CREATE TEMPORARY VIEW words AS
              SELECT et, w AS word FROM src
              CROSS JOIN UNNEST(REGEXP_EXTRACT_ALL(LOWER(`text`), '{WORD}', 0)) AS t (w)""",
        """INSERT INTO sink
              SELECT window_start, word, COUNT(*) FROM TABLE(
                TUMBLE(TABLE words, DESCRIPTOR(et), INTERVAL '10' SECOND))
              GROUP BY window_start, window_end, word""",
    ]


def main() -> int:
    inp, out, span, checkpoints = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", "2")
    conf.set("execution.checkpointing.interval", "2 s")
    conf.set("execution.checkpointing.storage", "filesystem")
    conf.set("execution.checkpointing.dir", f"file://{checkpoints}")
    conf.set("restart-strategy.type", "none")
    conf.set("table.local-time-zone", "UTC")
    *ddl, insert = statements(inp, out, span)
    for sql in ddl:
        env.execute_sql(sql)
    result = env.execute_sql(insert)
    done = result.get_job_client().get_job_execution_result().result()
    print(json.dumps({"netRuntimeMs": done.get_net_runtime()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
