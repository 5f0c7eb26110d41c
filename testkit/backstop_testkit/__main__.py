"""``python -m backstop_testkit``: the test kit's development commands."""

from backstop_testkit.cli import app

app()
