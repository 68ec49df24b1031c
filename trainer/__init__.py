"""The generic training loop: task interface, optimizer, sharding, checkpoints, metrics.

Knows nothing about images or text: a config names its task class
(``config.task = 'vit.task:ImageClassification'``) and the trainer imports it.
"""
