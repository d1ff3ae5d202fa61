"""One error type for everything a user can get wrong, so the CLI can print it and exit 2."""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: names the file and the field (or line) at fault.

    It survives pickling with its parts (a worker process's error reaches the parent as the same
    InputError, which the CLI reports as it would its own)."""

    def __init__(self, file: object, where: object, message: str):
        self.file = str(file) if file is not None else "<input>"
        self.where = str(where) if where not in (None, "") else ""
        self.message = message
        super().__init__(str(self))

    def __reduce__(self):
        return (type(self), (self.file, self.where, self.message))

    def __str__(self) -> str:
        loc = f"{self.file}: {self.where}" if self.where else self.file
        return f"{loc}: {self.message}"
