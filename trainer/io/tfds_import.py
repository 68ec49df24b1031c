"""Imports TensorFlow (Datasets) for any task's input pipeline, with TensorFlow kept off the GPUs.

TensorFlow only reads and decodes data here; left alone it would claim the memory of every
GPU that JAX is about to use.
"""

import functools
from typing import Any


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
