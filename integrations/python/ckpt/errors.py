"""Errors raised by ckpt, one class per kind of failure.

Every error is a `ckpt.Error`; each also derives from the built-in exception
that code written before this hierarchy caught, so `except KeyError` and
`except ValueError` keep working:

    try:
        cp.load(state, step)
    except ckpt.DataLossError as e:      # a checksum failed: the file is named
        ...
    except ckpt.NotFoundError:           # no such step (also a KeyError)
        ...
"""

__all__ = [
    "Error", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError", "FailedPreconditionError",
    "AbortedError", "DeadlineExceededError", "DataLossError", "UnavailableError", "ResourceExhaustedError",
    "PermissionDeniedError", "UnimplementedError", "InternalError",
]


class Error(RuntimeError):
    """Any failure reported by ckpt. `code` is the status code's name."""

    code = "UNKNOWN"

    def __str__(self):
        # KeyError would quote the message; every ckpt error reads the same.
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """Bad input: boxes, names, shapes, options, buffers."""
    code = "INVALID_ARGUMENT"


class NotFoundError(Error, KeyError):
    """No such step, tensor or blob."""
    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    """The step is already committed."""
    code = "ALREADY_EXISTS"


class FailedPreconditionError(Error):
    """The request does not fit the root (e.g. a step not newer than the latest)."""
    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    """The save was aborted: a rank failed, or another save holds the step."""
    code = "ABORTED"


class DeadlineExceededError(Error, TimeoutError):
    """A rank or the leader did not answer in time."""
    code = "DEADLINE_EXCEEDED"


class DataLossError(Error):
    """Corruption or truncation: the message names the file and byte offset."""
    code = "DATA_LOSS"


class UnavailableError(Error, OSError):
    """An I/O error that a retry may fix (EIO)."""
    code = "UNAVAILABLE"


class ResourceExhaustedError(Error, OSError):
    """Out of space or memory."""
    code = "RESOURCE_EXHAUSTED"


class PermissionDeniedError(Error, PermissionError):
    code = "PERMISSION_DENIED"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"
