"""Commit subjects fit one line of ``git log --oneline`` and of a review tool: 72 characters.

History lives in commit messages, so their subjects are what a reader scans. The check covers
the commits from the first one written under this rule on; the older ones stay as they landed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_UNDER_THE_RULE = "03f75c6"
LIMIT = 72
WRITTEN_BEFORE_THE_CHECK = {
    "04c7e1981156081551f519dc464a111c66e2e3ff",
    "acfdeb594b207900d952d5406b904cde740d804e",
    "b6693a6f38d29e2ca1070aeac11978d0a219145a",
    "16b44eac14a4dfd86c4eb42d736a5ff15825a3b4",
    "0f2db606dbfb5f77af365878aa040eaf3d5aa5f7",
}
"""Commits merged as they were (a branch started before this check existed; a helper's
branch merged before the check ran on it): shared history is not rewritten."""


def test_commit_subjects_are_at_most_72_characters() -> None:
    out = subprocess.run(
        ["git", "log", "--format=%H %s", f"{FIRST_UNDER_THE_RULE}^..HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    subjects = [line.split(" ", 1) for line in out.splitlines()]
    assert subjects, "no commit found from the first one under the rule"
    long = [
        f"{h}: {s} ({len(s)})"
        for h, s in subjects
        if len(s) > LIMIT and h not in WRITTEN_BEFORE_THE_CHECK
    ]
    assert not long, "commit subjects over 72 characters:\n" + "\n".join(long)
