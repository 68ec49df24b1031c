"""Evaluate a saved checkpoint without the training loop.

The workdir's saved config rebuilds the task and the model; the parameters are
restored onto whatever devices are present now, however many were used to train.
What does not read examples (predictions, ``init_from`` a workdir, exports) builds
the task from the data sizes the workdir recorded (``Task.without_data``), reading no data.
"""

import json
import pathlib
import tempfile

import jax

from trainer.ema import PARAMS_CHOICES
from trainer.errors import CheckpointError, WorkdirError
from trainer.io import storage
from trainer.io import workdir as workdir_lib
from trainer.io.checkpoints import EMA_ITEM, Checkpoints
from trainer.observe import observe_config
from trainer.partitioning import check_batch_size, make_mesh
from trainer.state import make_eval_step
from trainer.state_init import StateInit
from trainer.task import Task, load_task, resolved_task_class


def workdir_task(workdir: storage.Path, config, read_data: bool = True) -> Task:
  """The task of a workdir's saved ``config``: with ``read_data=False`` built from the data sizes
  recorded in ``model.json`` (``Task.without_data``), reading no data; a task that records none
  (``Task.data_sizes`` is None) is built from its data."""
  if read_data:
    return load_task(config)
  sizes = workdir_lib.load_model_facts(workdir).get(workdir_lib.DATA_SIZES)
  if sizes is None:
    return load_task(config)
  family = resolved_task_class(config)
  try:
    return family.without_data(config, sizes)
  except (KeyError, TypeError) as error:
    raise WorkdirError(
      f'{workdir / workdir_lib.MODEL_FACTS_FILE} is damaged: its {workdir_lib.DATA_SIZES} lack or mangle '
      f'{error}; delete that entry to read the data instead.'
    ) from None


def restore_checkpoint(
  workdir: str | storage.Path,
  which: str | int = 'latest',
  mesh=None,
  average_last: int = 1,
  *,
  read_data: bool = True,
  params: str = 'raw',
):
  """``(task, model parts, params, step)`` for checkpoint ``which`` ('latest', 'best' or a step).

  ``params='ema'``: the moving average of the parameters (``trainer/ema.py``) instead of the
  parameters; a checkpoint without one is a ``CheckpointError``.

  Only the parameters are read: no optimizer state is built or restored. With
  ``average_last=N`` the parameters are the mean of the N latest intact
  checkpoints ending at that step (Vaswani et al. averaged the last 5). ``read_data=False``: for
  uses that read no examples (predictions, exports), the task reads no data (``workdir_task``).
  """
  if params not in PARAMS_CHOICES:
    raise CheckpointError(f'params is {params!r}; it must be one of {", ".join(PARAMS_CHOICES)}.')
  item = EMA_ITEM if params == 'ema' else 'params'
  workdir = storage.as_path(workdir)
  config = workdir_lib.load_config(workdir)
  mesh = mesh or make_mesh()
  checkpoints = Checkpoints(
    workdir,
    best_metric=observe_config.checkpoint_metric(config),
    best_mode=config.best_mode,
    read_only=True,
    needed_items=('params',),
  )
  try:
    step = checkpoints.resolve(which)
    steps = checkpoints.intact_steps_up_to(step, average_last) if average_last >= 1 else []
    if len(steps) < average_last or not steps:
      raise CheckpointError(
        f'Cannot average the last {average_last} checkpoints up to step {step}: '
        f'{checkpoints.directory} keeps {steps} intact.'
      )
    task = workdir_task(workdir, config, read_data)
    task.prepare(workdir)
    init = StateInit(task, None, mesh, config.seed)  # abstract: no random model is made first
    restored = [checkpoints.restore_params(s, init.abstract_state.params, item) for s in steps]
    parts = init.parts(init.rest())
  finally:
    checkpoints.close()
  averaged = jax.tree.map(lambda *p: sum(p) / len(p), *restored) if len(restored) > 1 else restored[0]
  return task, parts, averaged, step


def evaluate_workdir(
  workdir: str | storage.Path,
  checkpoint: str | int = 'latest',
  split: str | None = None,
  batch_size: int | None = None,
  average_last: int = 1,
  params: str = 'raw',
) -> dict:
  """Evaluates one checkpoint on one split; writes ``eval_<split>_step<N>.json`` into the workdir
  (``eval_<split>_step<N>_ema.json`` for ``params='ema'``, the moving average)."""
  # Imported here: the training loop's metric writers import TensorFlow, which predictions
  # (``restore_checkpoint`` alone) do not need.
  from trainer.loop import evaluate_params  # pylint: disable=g-import-not-at-top

  workdir = storage.as_path(workdir)
  config = workdir_lib.load_config(workdir)
  split = split or config.eval_split
  mesh = make_mesh()
  given_as = 'batch_size' if batch_size else 'eval_batch_size'
  batch_size = batch_size or config.eval_batch_size
  check_batch_size(batch_size, mesh, given_as)
  task, parts, chosen, step = restore_checkpoint(workdir, checkpoint, mesh, average_last, params=params)
  # The task writes its files (hypotheses) into a scratch folder; they are copied into the workdir
  # where it can be written, so a read-only workdir still gets its metrics printed.
  with tempfile.TemporaryDirectory() as scratch:
    eval_step = make_eval_step(task, parts, mesh)
    metrics = evaluate_params(task, parts, chosen, split, mesh, batch_size, eval_step, pathlib.Path(scratch))
    if jax.process_index() == 0:
      for written in sorted(pathlib.Path(scratch).iterdir()):
        workdir_lib.write_or_say(workdir / written.name, written.read_bytes())
  # Numbers, and the signatures that say how a score was computed (sacreBLEU's); not the
  # sample translations, which are Markdown for TensorBoard.
  kept = {
    name: value
    for name, value in metrics.items()
    if not isinstance(value, str) or name.endswith('_signature')
  }
  result = dict(kept, step=int(step), split=split, checkpoint=str(checkpoint))
  name = f'eval_{split}_step{step}' + (f'_avg{average_last}' if average_last > 1 else '')
  if params == 'ema':
    result['params'], name = 'ema', name + '_ema'
  if average_last > 1:
    result['averaged_checkpoints'] = average_last
  if jax.process_index() == 0:
    workdir_lib.write_or_say(
      workdir / f'{name}.json', (json.dumps(result, indent=2, sort_keys=True) + '\n').encode()
    )
  return result
