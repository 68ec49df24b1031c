"""The errors we raise about what a user gave us: a config, a file, a workdir, a checkpoint.

The command lines (``trainer/command_line/cli.py``) print these as one line, ``error: <message>``, and
exit with status 2. Every other exception is a bug (ours or a library's) and keeps its
traceback. Each class also derives from the built-in exception a caller would expect, so
``except ValueError`` keeps working.
"""


class UserError(Exception):
  """Something the user can fix; the message names the thing and what is allowed."""


class ConfigError(UserError, ValueError):
  """A config field with a bad value, a missing one, or fields that do not go together."""


class DataError(UserError, ValueError):
  """Input data that is missing, unreadable or inconsistent (a mismatched parallel corpus)."""


class WorkdirError(UserError, ValueError):
  """A workdir written by another config, locked by another process, or not writable."""


class CheckpointError(UserError, ValueError):
  """A checkpoint that does not exist, is damaged, or could not be written (disk full)."""


class InputError(UserError, ValueError):
  """An input to predict on (a file, a sentence, an array) that cannot be read or does not suit the model."""


class TrainingDiverged(UserError, FloatingPointError):
  """The training loss, the gradient norm or the parameters became NaN or infinite."""


class MissingFileError(DataError, FileNotFoundError):
  """A data, tokenizer or workdir file that does not exist; ``except FileNotFoundError`` catches it too."""
