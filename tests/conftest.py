"""The tests run the trainer as the command lines do: with their log filters (``trainer.log_filters``)."""

from trainer import log_filters

log_filters.install()
