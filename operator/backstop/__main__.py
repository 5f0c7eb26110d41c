"""``python -m backstop``: the same CLI as the ``backstop`` console script."""

from backstop.cli import app

app()
