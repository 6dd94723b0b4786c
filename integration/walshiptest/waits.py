"""Bounded waits: the one wait_until of the integration tests and tools."""

import time


class StepError(Exception):
    """A step could not be carried out (set-up, a process, a bounded wait)."""


class WaitTimeout(StepError, AssertionError):
    """A bounded wait ran out. An AssertionError too, so a test that times
    out waiting for a condition fails (rather than errors) under unittest."""


def wait_until(pred, timeout, what="condition", interval=0.05):
    """Polls pred() until it returns a truthy value, which is returned.

    Raises WaitTimeout naming `what` (a string, or a callable giving one, for
    a message that shows the last state) after `timeout` seconds. pred() is
    called at least once, and once more at or after the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            desc = what() if callable(what) else what
            raise WaitTimeout("timed out after %.1fs waiting for %s" % (timeout, desc))
        time.sleep(interval)
