"""One exception type for every user error, so the CLI can print one line and exit 2."""


class DriftError(Exception):
    """A user-facing error: bad file, bad field, bad flag. Message names the file/field and the expectation."""

    exit_code = 2
