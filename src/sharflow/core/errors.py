"""Errors meant for people: each message names the file, key or record and says what to do."""


class SharflowError(Exception):
    """A problem with the user's input or config, reported without a traceback."""
