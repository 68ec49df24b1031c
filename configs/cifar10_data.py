"""The CIFAR-10 sources that the ViT's CIFAR-10 configs share. A config spreads one into its ``data``
section (``data=dict(**cifar10_data.FOLDER, augment=...)``) and adds what it does to the images.
"""

# The image folder data/cifar10/{train,test}/<class>/*.png that `python -m pipelines.download
# cifar10` writes (elsewhere: --config.data.path=DIR).
FOLDER = dict(source='folder', path='data/cifar10')

# A prepared tfds copy of `cifar10` (--config.data.data_dir=DIR).
TFDS = dict(source='tfds', name='cifar10')
