"""Expected failures that the CLI reports as one clear line and a non-zero exit.

Raise :class:`UserError` (or a subclass) for anything a user can fix: a missing file,
bad input, an unreachable database. The CLI prints ``error: <message>`` to stderr and
exits with ``exit_code``; a traceback is reserved for bugs.
"""

from __future__ import annotations


class UserError(Exception):
    """An expected error with a message that says what, where, and what to do."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class InputError(UserError):
    """Bad input data: missing file, invalid JSON, wrong schema."""


class DatabaseError(UserError):
    """The database cannot be used: bad URL, unreachable server, newer schema."""
