"""``python -m backstop_runtime``: run the one task this pod is configured for.

Exit codes: 0 when a bounded stream ended and the task was asked to stop, 2 for a
configuration error (the message names the variable or ``config`` field), 3 when a newer
copy of the task fenced this one out, 1 for anything else. The last line of stderr is
the cause, so ``kubectl describe pod`` (terminationMessagePolicy FallbackToLogsOnError)
and the operator's status show it.
"""

from __future__ import annotations

import sys

from backstop_runtime.main import main

if __name__ == "__main__":
    sys.exit(main())
