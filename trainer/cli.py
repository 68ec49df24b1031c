"""What ``train.py``, ``evaluate.py`` and ``ablate.py`` share: flag parsing, quiet logs and one-line errors.

A ``UserError`` (``trainer/errors.py``: a bad config value, a missing file) and a config file
that cannot be loaded or overridden print ``error: <message>`` on stderr and exit with status 2.
Every other exception is a bug, ours or a library's, and keeps its traceback.
"""

import pathlib
import sys

from absl import flags, logging
from ml_collections import config_flags

from trainer.errors import UserError

USAGE_STATUS = 2


def fail(message) -> None:
  """Prints ``error: <message>`` (one line) on stderr and exits with status 2."""
  print(f'error: {" ".join(str(message).split())}', file=sys.stderr, flush=True)
  sys.exit(USAGE_STATUS)


def quiet_library_logs() -> None:
  """Library INFO lines would drown the progress lines; ``--verbosity=0`` brings them back."""
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)


def run_reporting_user_errors(function, *args, **kwargs):
  """Calls ``function``; a ``UserError`` becomes ``error: <message>`` on stderr and exit status 2."""
  try:
    return function(*args, **kwargs)
  except UserError as error:
    fail(error)


def _override_named(argv: list[str], key: str) -> str:
  """The ``--config.a.b`` argument whose last part is ``key`` (the field ml_collections did not find)."""
  for argument in argv:
    name = argument.split('=', 1)[0].lstrip('-')
    if name.startswith('config.') and name.rsplit('.', 1)[-1] == key:
      return name
  return f'config.{key}'


def parse_flags(argv: list[str]) -> list[str]:
  """``absl.app.run``'s flag parser, with the config file's problems as one-line errors (status 2).

  ``config_flags`` loads the ``--config`` file while parsing: a missing file, a syntax error, a
  file without ``get_config`` and an override of a field that does not exist would otherwise end
  in a traceback or in absl's own message with status 1.
  """
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as error:
    fail(error)
  except SyntaxError as error:
    fail(f'config file {error.filename}, line {error.lineno}: syntax error: {error.msg}')
  except AttributeError as error:
    cause = error.args[0] if error.args else None
    if isinstance(cause, KeyError) and cause.args:
      key = cause.args[0].strip("'")
      fail(f'--{_override_named(argv, key)}: the config has no field {key!r}')
    if 'get_config' in str(error):
      fail(f'config file {_config_argument(argv)} has no get_config() function')
    raise
  if 'config' in flags.FLAGS and flags.FLAGS['config'].present:
    filename = config_flags.get_config_filename(flags.FLAGS['config'])
    if not pathlib.Path(filename).is_file():
      fail(f'config file {filename} not found')
  return remaining


def _config_argument(argv: list[str]) -> str:
  """The value of ``--config`` as given (``--config=path`` or ``--config path``)."""
  for index, argument in enumerate(argv):
    if argument.startswith('--config='):
      return argument.split('=', 1)[1]
    if argument == '--config' and index + 1 < len(argv):
      return argv[index + 1]
  return '--config'
