"""Error types whose messages read well."""


class ReadableKeyError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
