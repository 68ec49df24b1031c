"""Few-shot linear accuracies of a ViT workdir's model: ``python -m vit.fewshot --workdir W``.

  python -m vit.fewshot --workdir runs/vit_mnist_pretrain --source digits --shots 1,5,10,25
  python -m vit.fewshot --workdir W                  # the workdir's own data set (--source same)

``--source`` is a data source ('digits', 'idx', 'folder', 'tfds') read from ``--path``, or
'same' for the workdir's own data. Prints one JSON object (``fewshot_<k>shot`` and its
``_std`` over ``--seeds`` draws, ``step``, ``fewshot``, ``seeds``). The features and the
solve are ``vit.fewshot``'s (its ``__init__.py``); this module only reads the workdir and the data,
and no library module imports it.
"""

import json

from absl import app, flags

from trainer.command_line import cli


def _define_flags() -> dict:
  """The command's flags, defined when it runs (importing the module for its function defines none)."""
  defined = dict(
    workdir=flags.DEFINE_string('workdir', None, 'A workdir written by train.py with a ViT config.'),
    checkpoint=flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number."),
    source=flags.DEFINE_string(
      'source', 'same', "The data source of the few-shot set ('same': the workdir's)."
    ),
    path=flags.DEFINE_string('path', None, "The few-shot data set's path (its data.path)."),
    shots=flags.DEFINE_list('shots', ['1', '5', '10', '25'], 'Examples per class.'),
    seeds=flags.DEFINE_integer('seeds', 5, 'Draws of the k-shot examples to average.', lower_bound=1),
  )
  flags.mark_flag_as_required('workdir')
  return defined


def parse_shots(values: list[str]) -> tuple[int, ...]:
  from trainer.errors import ConfigError  # pylint: disable=g-import-not-at-top

  if not values or not all(value.isdigit() and int(value) >= 1 for value in values):
    raise ConfigError(f'--shots must be whole numbers >= 1 separated by commas, got {",".join(values)!r}.')
  return tuple(int(value) for value in values)


def evaluate_workdir_fewshot(
  workdir: str,
  checkpoint: str,
  source: str,
  path: str | None,
  shots: tuple[int, ...],
  seeds: int,
  held_out_per_class: int = 10,
  train_examples: int = 5000,
) -> dict:
  """Few-shot accuracies of a workdir's model on data set ``source`` ('same': its own data).

  Another data set is read with the workdir's data options, its images resized to the
  model's input size, without augmentation.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top

  from trainer.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top
  from trainer.partitioning import (
    Devices,  # pylint: disable=g-import-not-at-top
    make_mesh,  # pylint: disable=g-import-not-at-top
  )
  from vit.input_pipeline import load_image_data  # pylint: disable=g-import-not-at-top
  from vit.task import ImageClassification, fewshot_evaluation  # pylint: disable=g-import-not-at-top

  which = int(checkpoint) if str(checkpoint).isdigit() else checkpoint
  devices = Devices(make_mesh())
  task, parts, params, step = restore_checkpoint(workdir, which, devices.mesh)
  if not isinstance(task, ImageClassification):
    raise ConfigError(f'few-shot evaluation needs a ViT workdir; {workdir} trained {task.config.task!r}.')
  data = task.data
  if source != 'same':
    data_config = ml_collections.ConfigDict(task.config.data.to_dict())
    data_config.source, data_config.path = source, path
    data_config.image_size = tuple(task.data.image_shape[:2])
    data_config.mean = data_config.std = None
    data = load_image_data(data_config)
  config = ml_collections.ConfigDict(
    dict(
      shots=tuple(shots), seeds=seeds, held_out_per_class=held_out_per_class, train_examples=train_examples
    )
  )
  results = fewshot_evaluation(
    parts.merge(params), data, 'test', config, devices=devices, batch_size=task.config.eval_batch_size
  )
  return dict(results, step=int(step), fewshot=source, seeds=seeds)


def run() -> None:
  given = _define_flags()

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
    cli.quiet_library_logs()
    shots = cli.run_reporting_user_errors(parse_shots, given['shots'].value)
    with cli.loading_libraries():
      import jax  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import  (JAX: not for --help)
    result = cli.run_reporting_user_errors(
      evaluate_workdir_fewshot,
      given['workdir'].value,
      given['checkpoint'].value,
      given['source'].value,
      given['path'].value,
      shots,
      given['seeds'].value,
    )
    print(json.dumps(result, sort_keys=True))

  app.run(main, flags_parser=cli.parse_flags)


if __name__ == '__main__':
  run()
