"""The tests run the trainer as the command lines do: with their log filters (``trainer.log_filters``).

``eight_devices`` runs a test's 8-device half in one worker process shared by the session's tests
(``tests/eight_devices.py``).
"""

import pytest

from tests.eight_devices import EightDevices
from trainer import log_filters

log_filters.install()


@pytest.fixture(scope='session')
def eight_devices(tmp_path_factory):
  worker = EightDevices(tmp_path_factory.mktemp('eight_devices') / 'log.txt')
  yield worker
  worker.close()
