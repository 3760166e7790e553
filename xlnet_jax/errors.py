"""The errors a user can act on: one family, each message one line naming the field or file.

The CLI catches `XLNetJaxError` and prints its message without a traceback. Each class also
derives from the builtin it refines (ValueError, RuntimeError, FileNotFoundError), so a
caller that catches the builtin keeps working.
"""


class XLNetJaxError(Exception):
    """Base of every user-facing error: the message is the whole story."""


class UsageError(XLNetJaxError):
    """The command line is wrong; the message says how."""


class ConfigError(XLNetJaxError, ValueError):
    """A config field breaks a constraint; the message names the field."""


class MeshError(XLNetJaxError, ValueError):
    """The configured mesh does not fit the devices."""


class DataError(XLNetJaxError, ValueError):
    """A corpus input, tokenizer or prepared corpus cannot be used.

    The message names the file or directory at fault and says what to do about it.
    """


class WorkdirError(XLNetJaxError, RuntimeError):
    """The workdir cannot be used; the message names it and what to do."""


class CheckpointError(XLNetJaxError, RuntimeError):
    """A checkpoint cannot be used; the message names the path and what to do."""


class NonFiniteError(XLNetJaxError, RuntimeError):
    """A step produced a non-finite value under nonfinite_policy='halt', or many in a row."""


class HFFormatError(XLNetJaxError, ValueError):
    """A HuggingFace or params directory cannot be read; the message names the file or field."""


class MissingFileError(XLNetJaxError, FileNotFoundError):
    """A file the command needs is not there; the message names it."""


class MissingDependencyError(XLNetJaxError, ImportError):
    """An optional dependency the command needs is not installed; the message says which extra."""


# The CLI's exit code for a StorageError: storage, not the run, failed, so `launch run`
# trains again (resuming) instead of ending the job.
STORAGE_EXIT_CODE = 4
# The CLI's exit code for a trainer stopped by a signal (SIGTERM: a preemption notice, a
# maintenance event, `launch stop`) before num_train_steps, after it saved: not finished, so
# `launch run` trains again (resuming) unless the user asked it to stop. Only a run that
# reached its last step exits 0.
STOPPED_EXIT_CODE = 6


class StorageError(XLNetJaxError, RuntimeError):
    """Object storage kept failing past the retry budget (paths.retry); rerunning resumes."""


class SavesFailedError(StorageError, CheckpointError):
    """Checkpoint saves failed too often in a row, or one outlasted its wait: the run stops
    and a rerun resumes from the newest complete step."""


class LeaseLostError(StorageError, WorkdirError):
    """This run can no longer be sure it holds its workdir lease (run/lease.py): it writes
    nothing more, and a rerun (`launch run` pauses and trains again) resumes."""


def one_line(error: BaseException, limit: int = 160) -> str:
    """Another library's exception as `Type: first line`, cut to `limit` characters, for a
    message of ours that names it (storage and tensorstore errors run to many lines)."""
    lines = str(error).strip().splitlines() or [""]
    text = f"{type(error).__name__}: {lines[0]}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
