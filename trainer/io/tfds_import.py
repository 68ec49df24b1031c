"""Imports TensorFlow (Datasets) for any task's input pipeline, with TensorFlow kept off the GPUs,
and opens a prepared tfds data set.

TensorFlow only reads and decodes data here; left alone it would claim the memory of every
GPU that JAX is about to use.
"""

import functools
from typing import Any

import ml_collections

from trainer.errors import ConfigError, DataError, MissingFileError


@functools.cache
def import_tensorflow_on_cpu() -> Any:
  """``tensorflow``, imported with every GPU hidden from it."""
  import tensorflow as tf

  try:
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError:  # TensorFlow was initialised elsewhere; too late to change.
    pass
  return tf


def import_tfds_on_cpu() -> Any:
  """``tensorflow_datasets``, imported after ``import_tensorflow_on_cpu``."""
  import_tensorflow_on_cpu()
  import tensorflow_datasets as tfds

  return tfds


def prepared_builder(config: ml_collections.ConfigDict, example: str, build_note: str = '') -> Any:
  """The tfds builder of ``config.name`` in ``config.data_dir``, checked to be prepared: a
  ``ConfigError`` without a name (``example`` is one), a ``DataError`` for an unknown one and a
  ``MissingFileError`` with the command that prepares it (``build_note`` after the command)."""
  if not config.name:
    raise ConfigError(f"data.name must be set for source 'tfds' (e.g. {example!r})")
  tfds = import_tfds_on_cpu()
  try:
    builder = tfds.builder(config.name, data_dir=config.data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    raise DataError(f'unknown tfds data set {config.name!r}') from None
  try:  # as_dataset, not is_prepared(): tfds.testing.mock_data fakes only as_dataset
    builder.as_dataset(split='train')
  except AssertionError:
    data_dir = builder.data_dir_root
    raise MissingFileError(
      f'tfds data set {config.name!r} is not prepared in {data_dir} and this project never downloads: '
      f'on a machine with internet run `tfds build {config.name} --data_dir {data_dir}`{build_note}, '
      f'then copy {data_dir}/{config.name} here (or point data.data_dir at it)'
    ) from None
  return builder
