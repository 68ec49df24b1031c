"""A workdir in a bucket: ``gs://test-bucket/run`` on a local GCS emulator (``gcp-storage-emulator``).

Every layer is pointed at the emulator: TensorStore (orbax's array data) by
``TENSORSTORE_GCS_HTTP_URL``, gcsfs (``etils.epath``: orbax's metadata, the config, the
metrics, the integrity record) and google-cloud-storage (the lock) by ``STORAGE_EMULATOR_HOST``.
``EPATH_USE_TF=false`` keeps epath on gcsfs (TensorFlow's GCS client has no emulator setting), even
where epath chose TensorFlow before the variable was set (``trainer.io.storage.as_path``).
The emulator ignores preconditions, so the fixture adds ``ifGenerationMatch`` to its uploads
and deletes, as GCS does them (412 when the object's generation is another).
"""

import importlib.util
import json
import os
import socket
import time
from http import HTTPStatus

import pytest

from tests.translation_test_configs import tiny_translation_config
from tests.vit_test_configs import tiny_vit_config
from trainer.errors import WorkdirError

WORKDIR = 'gs://test-bucket/run'


def _honour_generation_preconditions(server_module, objects) -> None:
  def guarded(handler):
    def handle(request, response, storage, *args, **kwargs):
      wanted = request.query.get('ifGenerationMatch')
      if wanted:
        name = request.params.get('object_id') or (request.query.get('name') or [None])[0]
        if name is None:
          name = request.data['meta'].get('name')
        try:
          current = storage.get_file_obj(request.params['bucket_name'], name)['generation']
        except Exception:  # pylint: disable=broad-except  (no such object)
          current = '0'
        if str(current) != wanted[0]:
          response.status = HTTPStatus.PRECONDITION_FAILED
          response.json({'error': {'code': 412, 'message': 'conditionNotMet', 'errors': []}})
          return None
      return handler(request, response, storage, *args, **kwargs)

    return handle

  for _, handlers in server_module.HANDLERS:
    for method, handler in list(handlers.items()):
      if handler in (objects.insert, objects.delete):
        handlers[method] = guarded(handler)


# About one run in three, TensorStore's write of an OCDBT manifest to the emulator fails with
# "Malformed StorageGeneration" (an exchange between TensorStore and gcp-storage-emulator; orbax then
# reports the save as failed), whichever test runs first. The emulator tests are therefore left out
# of the default run: `BUCKET_TESTS=1 python -m pytest tests/test_bucket_workdir.py` runs them.
EMULATOR_TESTS = os.environ.get('BUCKET_TESTS') == '1'


@pytest.fixture(scope='module')
def bucket():
  if not EMULATOR_TESTS:
    pytest.skip(
      'the GCS emulator tests fail intermittently inside TensorStore: set BUCKET_TESTS=1 to run them'
    )
  pytest.importorskip('gcp_storage_emulator')
  from gcp_storage_emulator import server as server_module
  from gcp_storage_emulator.handlers import objects

  _honour_generation_preconditions(server_module, objects)
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  server = server_module.create_server('127.0.0.1', port, in_memory=True, default_bucket='test-bucket')
  server.start()
  url = f'http://127.0.0.1:{port}'
  patch = pytest.MonkeyPatch()
  for name, value in {
    'STORAGE_EMULATOR_HOST': url,
    'TENSORSTORE_GCS_HTTP_URL': url,
    'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'emulator',
    'EPATH_USE_TF': 'false',
    'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false',
  }.items():
    patch.setenv(name, value)
  yield url
  patch.undo()
  server.stop()


def _objects(prefix: str) -> list[str]:
  from trainer.io import storage

  fs, root = storage.filesystem(prefix)
  return [name[len(root) + 1 :] for name in fs.find(root)]


@pytest.mark.slow
def test_train_resume_and_evaluate_in_a_bucket(bucket):
  del bucket
  from trainer.evaluation import evaluate_workdir
  from trainer.io import metrics_io, storage
  from trainer.io.checkpoints import Checkpoints
  from trainer.loop import train_and_evaluate

  first = train_and_evaluate(tiny_vit_config(total_steps=4, eval_every_steps=2), WORKDIR)
  assert first.step == 4
  names = _objects(WORKDIR)
  assert 'config.json' in names and 'metrics.jsonl' in names
  assert 'checkpoints/4/integrity.json' in names and 'checkpoints/4/commit_success.txt' in names
  assert any(name.startswith('tensorboard/train/events.out.tfevents.') for name in names)
  assert 'train.lock' not in names  # released
  checkpoints = Checkpoints(storage.as_path(WORKDIR), read_only=True)
  assert checkpoints.all_steps() == [2, 4] and checkpoints.latest_step() == 4
  checkpoints.close()

  resumed = train_and_evaluate(tiny_vit_config(total_steps=6, eval_every_steps=2), WORKDIR)
  assert resumed.step == 6
  records = metrics_io.read_metrics(WORKDIR)
  train_steps = [record['step'] for record in records if record['split'] == 'train' and 'loss' in record]
  assert train_steps == [1, 2, 3, 4, 5, 6]  # the resumed run went on from step 4

  result = evaluate_workdir(WORKDIR)
  assert result['step'] == 6 and 0.0 <= result['accuracy'] <= 1.0
  assert result['accuracy'] == pytest.approx(resumed.eval_metrics['accuracy'])
  saved = json.loads(storage.as_path(f'{WORKDIR}/eval_{result["split"]}_step6.json').read_text())
  assert saved['accuracy'] == result['accuracy']

  from ablation import plots

  pictures = plots.plot_workdir(WORKDIR)  # what ablate.py draws, from the bucket into the bucket
  assert pictures and all(str(path).startswith(f'{WORKDIR}/plots/') and path.exists() for path in pictures)


@pytest.mark.slow
def test_a_translator_trains_resumes_evaluates_and_predicts_in_a_bucket(bucket):
  del bucket
  from trainer.evaluation import evaluate_workdir
  from trainer.io import storage
  from trainer.loop import train_and_evaluate
  from trainer.predictor import load_predictor

  workdir = 'gs://test-bucket/translator'

  def config(total_steps):  # SCAN with a SentencePiece vocabulary per side: spm.model objects too
    config = tiny_translation_config(total_steps=total_steps, eval_every_steps=2)
    config.data.tokenizer.update(kind='sentencepiece', shared=False, vocab_size=40)
    config.data.update(max_source_length=16, max_target_length=16)  # pieces: longer than words
    return config

  assert train_and_evaluate(config(2), workdir).step == 2
  names = _objects(workdir)
  assert 'hypotheses_test.txt' in names  # the training run's evaluation writes them too
  for side in ('source', 'target'):
    assert f'tokenizer/{side}/spm.model' in names and f'tokenizer/{side}/tokenizer.json' in names
  resumed = train_and_evaluate(config(4), workdir)  # loads the saved tokenizers from the bucket
  assert resumed.step == 4

  result = evaluate_workdir(workdir)
  assert result['step'] == 4 and result['bleu'] == pytest.approx(resumed.eval_metrics['bleu'])
  hypotheses = storage.as_path(f'{workdir}/hypotheses_{result["split"]}.txt').read_text().splitlines()
  assert len(hypotheses) == 48

  predictor = load_predictor(workdir)
  assert predictor.step == 4
  [prediction] = predictor(['jump twice'])
  assert isinstance(prediction['translation'], str)


@pytest.mark.slow
def test_damaged_object_in_a_bucket_is_skipped(bucket):
  del bucket
  from trainer.io import storage
  from trainer.io.checkpoints import Checkpoints
  from trainer.loop import train_and_evaluate

  workdir = 'gs://test-bucket/damaged'
  train_and_evaluate(tiny_vit_config(total_steps=4, eval_every_steps=4), workdir)
  data = max(
    (name for name in _objects(f'{workdir}/checkpoints/4/params') if '/d/' in f'/{name}'),
    key=lambda name: storage.as_path(f'{workdir}/checkpoints/4/params/{name}').stat().length,
  )
  path = storage.as_path(f'{workdir}/checkpoints/4/params/{data}')
  content = bytearray(path.read_bytes())
  content[len(content) // 2] ^= 0xFF
  path.write_bytes(bytes(content))
  checkpoints = Checkpoints(storage.as_path(workdir), read_only=True)
  assert checkpoints.latest_step() == 2
  assert 'differs from its checksum' in checkpoints.problem(4)
  checkpoints.close()


@pytest.mark.slow
def test_the_bucket_lock_refuses_a_second_holder_and_takes_over_a_stale_one(bucket):
  del bucket
  from trainer.io.bucket_lock import BucketLock
  from trainer.loop import train_and_evaluate
  from trainer.validation import check_workdir

  with pytest.raises(WorkdirError, match='bucket no-such-bucket does not exist'):
    check_workdir('gs://no-such-bucket/run')
  holder = BucketLock(WORKDIR, renew_seconds=0.2)
  holder.acquire()
  try:
    with pytest.raises(WorkdirError, match=r'is being trained by pid \d+ on host'):
      train_and_evaluate(tiny_vit_config(total_steps=1), WORKDIR)
    time.sleep(0.5)  # renewed meanwhile: still not stale for a short stale time
    with pytest.raises(WorkdirError, match='is being trained by'):
      BucketLock(WORKDIR, stale_seconds=2).acquire()
  finally:
    holder._stop.set()  # the holder "dies": it stops renewing and never releases
    holder._thread.join()
  time.sleep(2.5)
  second = BucketLock(WORKDIR, stale_seconds=2)
  second.acquire()  # takes over the stale lock
  third = BucketLock(WORKDIR, stale_seconds=2)
  with pytest.raises(WorkdirError):
    third.acquire()
  second.release()
  third.acquire()
  third.release()
  assert 'train.lock' not in _objects(WORKDIR)


def test_urls_go_through_gcsfs_although_epath_chose_tensorflow_before(monkeypatch, tmp_path):
  if importlib.util.find_spec('tensorflow') is None:
    pytest.skip('without TensorFlow epath has no other client to choose')
  from etils import epath
  from etils.epath import backend, gpath

  from trainer.io import storage

  monkeypatch.setenv('EPATH_USE_TF', '')  # restored afterwards
  monkeypatch.delenv('EPATH_USE_TF')
  gpath._is_tf_installed.cache_clear()
  assert epath.Path(tmp_path).exists()  # a first use, local (as orbax's): epath chooses TensorFlow for good
  assert epath.Path('gs://test-bucket/x')._backend is backend.tf_backend
  assert storage.as_path(WORKDIR)._backend is backend.fsspec_backend
  assert epath.Path('gs://test-bucket/x')._backend is backend.fsspec_backend  # orbax's paths too
