"""The one error type the command line prints as a single line (exit status 2).

Raised on purpose for input the user can fix: a bad parameter, source, label or pipeline
file, a missing topic. Any other exception is a bug and is shown with its traceback.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """An error caused by the command line or its inputs: printed as one line, exit status 2."""
