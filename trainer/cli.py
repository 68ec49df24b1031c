"""What ``train.py``, ``evaluate.py`` and ``ablate.py`` share: quiet logs and one-line errors."""

import sys

from absl import flags, logging

# Errors a user can fix (a bad config value, a missing file); anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, FloatingPointError, KeyError)


def quiet_library_logs() -> None:
  """Library INFO lines would drown the progress lines; ``--verbosity=0`` brings them back."""
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)


def run_reporting_user_errors(function, *args, **kwargs):
  """Calls ``function``; a user error becomes ``error: <message>`` on stderr and exit status 2."""
  try:
    return function(*args, **kwargs)
  except USER_ERRORS as error:
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    print(f'error: {message}', file=sys.stderr, flush=True)
    sys.exit(2)
