"""Checkpoints with orbax: asynchronous, atomic, the N latest plus the best by an evaluation metric.

A checkpoint holds the whole training state as one orbax item per field of the
``TrainState`` named in ``STATE_ITEMS`` (``params``, ``opt_state`` and, in a run with a moving
average of the parameters, ``trainer/ema.py``, ``ema_params``) beside ``meta``, a small JSON of
the step; saving and restoring both read that list, and evaluation restores the parameters
alone. The dropout randomness and the data position are functions of the step
and the seed, so restoring the step restores them too.

Every checkpoint carries an integrity record (``trainer/io/integrity.py``, which says
why it is a record of the files and when it is written). A checkpoint that fails
its check is skipped with one warning line naming it, and the previous intact one
is used; asked for by step number, it is a ``CheckpointError``. ``latest_step()``
is the latest *intact* step, so resuming never starts from a damaged one; a
damaged step that training reaches again is moved to ``<workdir>/damaged_checkpoints``.
The loop never saves a state with a non-finite value (``count_non_finite``), and a
checkpoint whose parameters are not all finite (written by older code) is refused when
restored, with a ``CheckpointError`` naming it.
A full disk while saving is a ``CheckpointError`` naming the step and the last
intact one. The workdir may be a bucket (``gs://bucket/run``, see ``trainer/io/storage.py``).
"""

import contextlib
import dataclasses
import logging
import shutil
import threading
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from trainer.errors import CheckpointError
from trainer.io import integrity, storage

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StateItem:
  """A field of the ``TrainState`` saved as the orbax item of the same name."""

  name: str
  # Saved only where the state has it; a checkpoint without it restores it as a copy of the parameters.
  optional: bool = False


EMA_ITEM = 'ema_params'  # only in the checkpoints of runs with config.ema.decay > 0
STATE_ITEMS = (StateItem('params'), StateItem('opt_state'), StateItem(EMA_ITEM, optional=True))
META_ITEM = 'meta'  # {'step': step}; the checkpoints of older code also hold a 'format' field, never read
_REQUIRED = tuple(item.name for item in STATE_ITEMS if not item.optional)
_ITEMS = (*_REQUIRED, META_ITEM)  # what a checkpoint needs to be intact for training
_TMP_SUFFIX = '.orbax-checkpoint-tmp'


def _join_background_writes(seconds: float = 60.0) -> None:
  """Lets orbax's save threads still running after one of them failed end before the error is reported.

  A full disk found by one item's write (the small ``meta`` JSON fails first) ends the save while
  the other items' threads still run; at exit they would find the interpreter's executors shut
  down, and each would log a traceback.
  """
  deadline = time.monotonic() + seconds
  for thread in threading.enumerate():
    if type(thread).__module__.startswith('orbax.') and thread is not threading.current_thread():
      threading.Thread.join(thread, max(deadline - time.monotonic(), 0.0))


class _ReadOnlyNotice(logging.Filter):
  def filter(self, record):
    return 'directory is read only' not in record.getMessage()


@contextlib.contextmanager
def _without_read_only_notice():
  """Orbax warns that a directory opened read-only is read-only; we asked for it."""
  absl_logger, notice = logging.getLogger('absl'), _ReadOnlyNotice()
  absl_logger.addFilter(notice)
  try:
    yield
  finally:
    absl_logger.removeFilter(notice)


class Checkpoints:
  def __init__(
    self,
    workdir: storage.Path,
    *,
    keep: int = 3,
    best_metric: str | None = None,
    best_mode: str = 'max',
    asynchronous: bool = True,
    read_only: bool = False,
    needed_items: tuple[str, ...] = _ITEMS,
  ):
    if best_mode not in ('max', 'min'):
      raise ValueError(f"best_mode must be 'max' or 'min', got {best_mode!r}.")
    self.best_metric = best_metric
    self.best_mode = best_mode
    self.read_only = read_only
    self.directory = storage.absolute(workdir) / 'checkpoints'
    self._asynchronous = asynchronous
    self._saving = None  # the step whose save is in flight
    self._needed_items = tuple(needed_items)  # what "intact" covers: ('params',) for evaluation
    self._problems = {}  # (step, items) -> None (intact) or what is wrong with it
    self._reported = set()
    policies = [checkpoint_managers.LatestN(n=keep)]
    if best_metric:
      policies.append(
        checkpoint_managers.BestN(
          get_metric_fn=lambda metrics: metrics[best_metric],
          reverse=best_mode == 'min',
          n=1,
          keep_checkpoints_without_metrics=False,
        )
      )
    options = ocp.CheckpointManagerOptions(
      preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
      # best_fn makes orbax store each checkpoint's metrics; the policies above decide what is kept.
      best_fn=(lambda metrics: metrics[best_metric]) if best_metric else None,
      best_mode=best_mode,
      # Always orbax's asynchronous checkpointer: only it calls back before publishing a step;
      # asynchronous=False waits after each save instead.
      enable_async_checkpointing=True,
      async_options=ocp.AsyncOptions(post_finalization_callback=self._write_record),
      cleanup_tmp_directories=not read_only,
      read_only=read_only,
      create=not read_only,
      save_interval_steps=0 if read_only else 1,  # orbax warns when read_only keeps its default 1
    )
    with _without_read_only_notice():
      self.manager = ocp.CheckpointManager(
        self.directory, item_names=(*(item.name for item in STATE_ITEMS), META_ITEM), options=options
      )

  # Which steps there are, and which are intact --------------------------------

  def all_steps(self) -> list[int]:
    """Every saved step, intact or not (a save in flight is not one yet)."""
    if not self.directory.is_dir():
      return []
    return sorted(
      int(path.name) for path in self.directory.iterdir() if path.name.isdigit() and path.is_dir()
    )

  def problem(self, step: int, items: tuple[str, ...] | None = None) -> str | None:
    """``None`` if the ``items`` (default: the needed ones) of checkpoint ``step`` are intact, else what is wrong."""
    key = (step, items or self._needed_items)
    if key not in self._problems:
      self._problems[key] = integrity.check(self.directory / str(step), key[1])
    return self._problems[key]

  def _first_intact(self, candidates: list[int], what: str) -> int:
    """The first intact step of ``candidates``; each damaged one before it is named in one warning."""
    for index, step in enumerate(candidates):
      if self.problem(step) is None:
        for skipped in candidates[:index]:
          self._report(skipped, f'using step {step} instead')
        return step
    for skipped in candidates:
      self._report(skipped, 'no other checkpoint to use')
    raise CheckpointError(
      f'No intact checkpoint in {self.directory} for {what}: '
      + '; '.join(f'step {step}: {self.problem(step)}' for step in candidates)
      + '.'
    )

  def _report(self, step: int, consequence: str) -> None:
    if step not in self._reported:
      self._reported.add(step)
      _log.warning(
        'Checkpoint %d in %s is damaged or incomplete (%s); %s.',
        step,
        self.directory,
        self.problem(step),
        consequence,
      )

  def latest_step(self) -> int | None:
    """The latest intact step (what training resumes from); ``None`` without checkpoints.

    Newer damaged steps are skipped with a warning; a ``CheckpointError`` if none is intact.
    """
    steps = self.all_steps()
    return self._first_intact(steps[::-1], 'the latest step') if steps else None

  def intact_steps_up_to(self, step: int, count: int) -> list[int]:
    """The ``count`` latest intact steps up to ``step`` (fewer if there are not as many), oldest first."""
    found = []
    for candidate in reversed([s for s in self.all_steps() if s <= step]):
      if len(found) == count:
        break
      if self.problem(candidate) is None:
        found.append(candidate)
      else:
        self._report(candidate, 'left out')
    return found[::-1]

  def best_step(self) -> int | None:
    """The intact step with the best ``best_metric`` (ties: the later step); ``None`` if none has it."""
    scored = []
    for step in self.all_steps():
      try:
        metrics = self.manager.metrics(step)
      except Exception:  # pylint: disable=broad-except
        metrics = None  # unreadable metrics: a damaged checkpoint, reported if it would have been chosen
      if metrics and self.best_metric in metrics:
        scored.append((metrics[self.best_metric] * (1 if self.best_mode == 'max' else -1), step))
    if not scored:
      return None
    return self._first_intact(
      [step for _, step in sorted(scored, reverse=True)], f'the best {self.best_metric}'
    )

  def resolve(self, which: str | int) -> int:
    """'latest', 'best' or a step number -> an intact step, else a ``CheckpointError``."""
    steps = self.all_steps()
    if not steps:
      raise CheckpointError(f'No checkpoints in {self.directory}.')
    if which == 'latest':
      return self.latest_step()
    if which == 'best':
      step = self.best_step()
      if step is None:
        raise CheckpointError(f'No checkpoint in {self.directory} has the metric {self.best_metric!r}.')
      return step
    try:
      step = int(which)
    except ValueError:
      raise CheckpointError(f"Checkpoint must be 'latest', 'best' or a step number, got {which!r}.") from None
    if step not in steps:
      raise CheckpointError(f'No checkpoint for step {step} in {self.directory}; saved steps: {steps}.')
    self._require_intact(step)
    return step

  def _require_intact(self, step: int, items: tuple[str, ...] | None = None) -> None:
    if self.problem(step, items) is not None:
      raise CheckpointError(
        f'Checkpoint {step} in {self.directory} is damaged or incomplete: {self.problem(step, items)}.'
      )

  # Saving ----------------------------------------------------------------------

  def save(self, step: int, state: Any, metrics: dict[str, float] | None = None) -> None:
    """Starts saving ``state`` (a ``TrainState``) as checkpoint ``step``; returns before it is written."""
    self.wait()  # the previous save finishes (or reports a full disk) before _saving names this one
    self._set_aside_damaged(step)
    self._problems = {key: problem for key, problem in self._problems.items() if key[0] != step}
    self._saving = step
    args = ocp.args.Composite(
      **{item.name: ocp.args.StandardSave(value) for item, value in _present(state)},
      **{META_ITEM: ocp.args.JsonSave({'step': int(step)})},
    )
    try:
      self.manager.save(step, args=args, metrics=metrics, force=True)
    except Exception as error:
      self._raise_if_disk_full(error)
      raise
    if not self._asynchronous:
      self.wait()

  def _write_record(self) -> None:
    """Orbax's post-finalisation callback (primary process): the step is complete but not yet published."""
    final = self.directory / str(self._saving)
    temporary = final.with_name(final.name + _TMP_SUFFIX)
    # In a bucket orbax writes the step in place (no rename there) and marks it committed afterwards.
    integrity.write_record(temporary if not storage.is_remote(final) and temporary.is_dir() else final)

  def _set_aside_damaged(self, step: int) -> None:
    """A damaged checkpoint at ``step`` (training resumed before it) moves out of orbax's way."""
    path = self.directory / str(step)
    if not path.is_dir() or self.problem(step) is None:
      return  # none, or an intact one: orbax refuses to overwrite it
    if jax.process_index() == 0:
      target = self.directory.parent / 'damaged_checkpoints' / str(step)
      suffix = 1
      while target.exists():
        target, suffix = target.with_name(f'{step}.{suffix}'), suffix + 1
      target.parent.mkdir(exist_ok=True)
      if storage.is_remote(path):
        fs, source = storage.filesystem(path)
        fs.mv(source, storage.filesystem(target)[1], recursive=True)
      else:
        shutil.move(path, target)
      _log.warning('Moved damaged checkpoint %d to %s to save a new one.', step, target)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

      multihost_utils.sync_global_devices(f'checkpoints: set aside step {step}')
    self.manager.reload()

  def _raise_if_disk_full(self, error: BaseException) -> None:
    step, self._saving = self._saving, None
    if not storage.is_disk_full(error):
      return
    _join_background_writes()
    saved = self.intact_phrase(excluding=step)
    # The writes cancelled when the disk was found full are reported at exit otherwise.
    warnings.filterwarnings('ignore', message="coroutine '.*' was never awaited", category=RuntimeWarning)
    raise CheckpointError(
      f'no space left while saving checkpoint {step} in {self.directory}; {saved}'
    ) from error

  def intact_phrase(self, excluding: int | None = None) -> str:
    """'checkpoints up to M are intact' (M: the latest intact step), for the one-line errors of a full disk."""
    intact = [s for s in self.all_steps() if s != excluding and self.problem(s) is None]
    return f'checkpoints up to {intact[-1]} are intact' if intact else 'no earlier checkpoint is intact'

  def wait(self) -> None:
    """Blocks until the save in flight is written; a full disk is a ``CheckpointError``."""
    try:
      self.manager.wait_until_finished()
    except Exception as error:
      self._raise_if_disk_full(error)
      raise
    self._saving = None

  def close(self) -> None:
    try:
      self.wait()
    finally:
      self.manager.close()

  # Restoring -------------------------------------------------------------------

  def has_item(self, step: int, item: str) -> bool:
    """Whether checkpoint ``step`` holds ``item`` (``EMA_ITEM`` only where the run kept an average)."""
    return (self.directory / str(step) / item).is_dir()

  def restore(self, step: int, abstract_state: Any) -> Any:
    """The ``TrainState`` of intact checkpoint ``step``, on the shardings named in ``abstract_state``.

    A state with ``ema_params`` restores them too; from a checkpoint saved without an average (the
    run had ``config.ema.decay`` 0 until now) the average starts as a copy of the parameters."""
    wanted = _present(abstract_state)
    saved = [(item, like) for item, like in wanted if not item.optional or self.has_item(step, item.name)]
    self._require_intact(step, tuple(item.name for item, _ in saved))
    restored = self.manager.restore(
      step, args=ocp.args.Composite(**{item.name: ocp.args.StandardRestore(like) for item, like in saved})
    )
    self._require_finite(step, restored['params'])
    fields = {item.name: restored[item.name] for item, _ in saved}
    for item, _ in wanted:
      if item.name not in fields:  # an optional item the checkpoint lacks
        _log.warning('Checkpoint %d has no moving average of the parameters; it starts from them.', step)
        fields[item.name] = jax.tree.map(jnp.copy, restored['params'])
    like = abstract_state.step
    value = np.asarray(step, like.dtype)
    step_array = jax.make_array_from_callback(like.shape, like.sharding, lambda index: value[index])
    return abstract_state.replace(step=step_array, **fields)

  def restore_params(self, step: int, abstract_params: Any, item: str = 'params') -> Any:
    """Only the parameters (``item='params'``) or their moving average (``EMA_ITEM``) of checkpoint
    ``step``, checked intact (no optimizer state is read)."""
    if item == EMA_ITEM and not self.has_item(step, EMA_ITEM):
      raise CheckpointError(
        f'Checkpoint {step} in {self.directory} has no moving average of the parameters '
        '(the run had config.ema.decay 0); use the raw parameters.'
      )
    self._require_intact(step, (item,))
    params = self.manager.restore(
      step, args=ocp.args.Composite(**{item: ocp.args.StandardRestore(abstract_params)})
    )[item]
    self._require_finite(step, params)
    return params

  def _require_finite(self, step: int, params: Any) -> None:
    if bad := count_non_finite(params):
      raise CheckpointError(
        f'Checkpoint {step} in {self.directory} has non-finite values in {bad} of its '
        f'{len(jax.tree.leaves(params))} parameter arrays (saved after training diverged); '
        'restore an earlier step.'
      )


def _present(state: Any) -> list[tuple[StateItem, Any]]:
  """``(item, value)`` for each item of ``STATE_ITEMS`` that ``state`` holds (an optional one may be ``None``)."""
  return [(item, getattr(state, item.name)) for item in STATE_ITEMS if getattr(state, item.name) is not None]


@jax.jit
def _non_finite_leaves(floats: list[jax.Array]) -> jax.Array:
  return sum((~jnp.all(jnp.isfinite(x))).astype(jnp.int32) for x in floats) + jnp.int32(0)


def count_non_finite(tree: Any) -> int:
  """How many floating-point arrays of ``tree`` hold a NaN or an infinity.

  Arrays held whole by this process's CPU devices are read in place by numpy, since compiling the
  check for a tree of them takes longer than checking (docs/results.md, "Predict start-up").
  Arrays on accelerators or spread over processes are checked where they are.
  """
  floats = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
  if all(_on_this_host(x) for x in floats):
    return sum(not np.isfinite(np.asarray(x)).all() for x in floats)
  return int(_non_finite_leaves(floats))


def _on_this_host(x: Any) -> bool:
  if not isinstance(x, jax.Array):
    return True
  return x.is_fully_addressable and all(device.platform == 'cpu' for device in x.sharding.device_set)


def abstract_like(state: Any, sharding) -> Any:
  """Shape/dtype/sharding stand-ins for ``state``, to restore into without allocating twice.

  ``sharding`` is one sharding for every array or a tree of them like ``state``; orbax
  restores onto it whatever mesh the checkpoint was saved from.
  """
  if isinstance(sharding, jax.sharding.Sharding):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, sharding)
