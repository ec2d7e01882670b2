"""The error of a sweep that cannot start or be collected."""


class SweepError(ValueError):
    """A sweep cannot start or be collected; the message names the cause and the fix."""
