"""User-facing errors.

Owns: the one exception type every layer raises for a problem the user can fix (bad file, bad
flag, unsupported model). The CLI prints its message on one line and exits non-zero; anything
else is a bug and keeps its traceback.
"""


class MtpTurboError(Exception):
    """A problem with the user's input or environment, explained in the message."""


class ModelFileError(MtpTurboError):
    """The model file is missing, unreadable, not GGUF, truncated or of an unsupported kind."""


class ConfigError(MtpTurboError):
    """A configuration value (CLI flag or API argument) is out of range."""


class CacheError(MtpTurboError):
    """A cache operation that cannot be honoured (rollback past what is kept, bad session file)."""
