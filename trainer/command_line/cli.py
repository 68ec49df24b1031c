"""What ``train.py``, ``evaluate.py`` and ``ablate.py`` share: flag parsing, quiet logs and one-line errors.

A ``UserError`` (``trainer/errors.py``: a bad config value, a missing file) and a config file
that cannot be loaded or overridden print ``error: <message>`` on stderr and exit with status 2.
Every other exception is a bug, ours or a library's, and keeps its traceback. What the
libraries print from C++ while they load is kept off the terminal unless ``--verbose`` asks for it.
"""

import contextlib
import os
import pathlib
import signal
import sys
import tempfile

from absl import flags, logging
from ml_collections import config_flags

from trainer.command_line import log_filters
from trainer.errors import UserError

USAGE_STATUS = 2
INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C

_VERBOSE = flags.DEFINE_bool(
  'verbose', False, "Show the libraries' start-up messages (TensorFlow's, absl's) and their INFO logs."
)


def fail(message) -> None:
  """Prints ``error: <message>`` (one line) on stderr and exits with status 2."""
  print(f'error: {" ".join(str(message).split())}', file=sys.stderr, flush=True)
  sys.exit(USAGE_STATUS)


def quiet_library_logs() -> None:
  """Library INFO lines would drown the progress lines; ``--verbose`` or ``--verbosity=0`` brings them back.

  Warnings about what the trainer does on purpose, and tracebacks of writes it reports in one
  line, are filtered always (``trainer.command_line.log_filters``).
  """
  log_filters.install()
  if not flags.FLAGS['verbosity'].present and not _VERBOSE.value:
    logging.set_verbosity(logging.WARNING)


@contextlib.contextmanager
def loading_libraries(nothing_written: str = 'nothing was written', *, verbose: bool | None = None):
  """The block that imports JAX, TensorFlow and the rest, with their start-up chatter held back.

  TensorFlow's oneDNN notice and absl's "All log messages before absl::InitializeLog()" line come
  from C++ straight to file descriptor 2, so Python's ``sys.stderr`` cannot filter them: the
  descriptor points at a temporary file while the block runs, and what it caught is shown only
  if the block fails (``--verbose`` leaves the descriptor alone). A Ctrl-C during the block ends
  the process at once with one line that says ``nothing_written``: raised as ``KeyboardInterrupt``
  inside a half-imported C extension it printed 30 lines of traceback, or crashed the interpreter.
  ``verbose`` stands for ``--verbose`` before the flags are parsed.
  """
  if verbose is None:
    verbose = _VERBOSE.value
  sys.stderr.flush()
  terminal = os.dup(2)

  def interrupted(*_):
    os.write(terminal, f'interrupted while loading the libraries; {nothing_written}\n'.encode())
    os._exit(INTERRUPTED_STATUS)

  previous_handler = signal.signal(signal.SIGINT, interrupted)
  try:
    with tempfile.TemporaryFile() as caught:
      if not verbose:
        os.dup2(caught.fileno(), 2)
      try:
        yield
      except BaseException:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        caught.seek(0)
        os.write(2, caught.read())
        raise
  finally:
    sys.stderr.flush()
    os.dup2(terminal, 2)
    os.close(terminal)
    signal.signal(signal.SIGINT, previous_handler)


@contextlib.contextmanager
def interrupt_exits(doing: str, intact: str):
  """Ctrl-C inside the block (a command's start-up: reading data, building the model and its state,
  tracing and compiling) ends the process at once with one line, ``interrupted while <doing>;
  <intact>``, and status 130.

  A ``KeyboardInterrupt`` raised in JAX's tracing or compiling, or in a half-imported library,
  printed a long traceback or crashed the interpreter; here nothing unwinds: the process exits
  without running its exit handlers, so ``intact`` must stay true at every moment of the block
  (files are written whole or not at all, ``trainer.io.storage``). Python runs a signal handler
  between two bytecodes, so during one long compilation in C++ it runs as that returns. The
  training loop's handler (``trainer.stop.StopRequest``) takes over once training begins and
  does not hand SIGINT back to this one (``until_training``).
  """
  sys.stderr.flush()

  def interrupted(*_):
    os.write(2, f'interrupted while {doing}; {intact}\n'.encode())
    os._exit(INTERRUPTED_STATUS)

  interrupted.until_training = True
  previous = signal.signal(signal.SIGINT, interrupted)
  try:
    yield
  finally:
    if signal.getsignal(signal.SIGINT) is interrupted:
      signal.signal(signal.SIGINT, previous)


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
  in a traceback or in absl's own message with status 1. A config file completes itself from its
  task's defaults (``configs.common.experiment``), which imports the task's family and JAX: the
  parsing runs as ``loading_libraries``.
  """
  verbose = any(argument in ('--verbose', '--verbose=true', '--verbose=True') for argument in argv)
  with loading_libraries(verbose=verbose):
    remaining, problem = _parse(argv)
  if problem:
    fail(problem)
  if 'config' in flags.FLAGS and flags.FLAGS['config'].present:
    filename = config_flags.get_config_filename(flags.FLAGS['config'])
    if not pathlib.Path(filename).is_file():
      fail(f'config file {filename} not found')
  return remaining


def _parse(argv: list[str]) -> tuple[list[str] | None, str | None]:
  """The arguments left after the flags, or the problem with them in one line."""
  try:
    return flags.FLAGS(argv), None
  except flags.Error as error:
    return None, str(error)
  except SyntaxError as error:
    return None, f'config file {error.filename}, line {error.lineno}: syntax error: {error.msg}'
  except UserError as error:  # a config file's own values, checked as it completes itself
    return None, str(error)
  except AttributeError as error:
    cause = error.args[0] if error.args else None
    if isinstance(cause, KeyError) and cause.args:
      key = cause.args[0].strip("'")
      return None, f'--{_override_named(argv, key)}: the config has no field {key!r}'
    if 'get_config' in str(error):
      return None, f'config file {_config_argument(argv)} has no get_config() function'
    raise


def _config_argument(argv: list[str]) -> str:
  """The value of ``--config`` as given (``--config=path`` or ``--config path``)."""
  for index, argument in enumerate(argv):
    if argument.startswith('--config='):
      return argument.split('=', 1)[1]
    if argument == '--config' and index + 1 < len(argv):
      return argv[index + 1]
  return '--config'
