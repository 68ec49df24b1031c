"""The real tasks of the throughput benchmarks over random inputs: no data set, corpus or tokenizer is read.

``SyntheticImageTask`` (the ViT's ``ImageClassification``) and ``SyntheticTranslation`` (the
translator's ``Translation``) keep their task's model, loss and metrics; the benchmarks make the
batches. Defining no flags, they can be imported anywhere (a test, a notebook).
"""

from flax import nnx

from seq2seq.architectures import make_translator
from seq2seq.task import Translation
from vit.input_pipeline import ImageShapes
from vit.task import ImageClassification


class SyntheticImageTask(ImageClassification):
  """The real ViT task with random square RGB images."""

  def __init__(self, config, image_size: int, num_classes: int):
    self.config = config
    self.label_smoothing = 0.0
    self.init_from = None
    self.distillation = None
    self.sizes = ImageShapes(num_classes, (image_size, image_size, 3))


class SyntheticTranslation(Translation):
  """The real translation task (loss, metrics) over random token ids, one vocabulary both sides."""

  def __init__(self, config, vocab_size: int):
    self.config = config
    self.label_smoothing = config.label_smoothing
    self.vocab_size = vocab_size

  def make_model(self, rngs: nnx.Rngs) -> nnx.Module:
    return make_translator(
      self.config.model, source_vocab_size=self.vocab_size, target_vocab_size=self.vocab_size, rngs=rngs
    )
