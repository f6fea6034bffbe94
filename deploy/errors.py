"""The one error type the command line prints as a single line (exit status 2).

Raised on purpose for input the user can fix: a bad parameter, source, label or pipeline
file, a missing topic. Any other exception is a bug and is shown with its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["UserError", "user_input"]


class UserError(ValueError):
    """An error caused by the command line or its inputs: printed as one line, exit status 2."""


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Treat a ``ValueError`` raised inside the block as the user's (bad parameter, source,
    label or pipeline file): the checks of those raise ``ValueError`` naming what is wrong.
    """
    try:
        yield
    except UserError:
        raise
    except (ValueError, _yaml_error()) as exc:
        raise UserError(str(exc)) from exc


# --------------------------------------------------------------------------------------
# Parameter and label parsing
# --------------------------------------------------------------------------------------


def _yaml_error() -> type[Exception]:
    import yaml

    return yaml.YAMLError
