"""Input pipelines shared by every model family: step-indexed batches run by grain, ArrayRecord files.

- ``pipelines.steps``: the batches of a training run as a pure function of the step, executed
  ahead of the trainer by grain's threads (the exact-resume rule every family keeps).
- ``pipelines.records``: ArrayRecord files, the disk-backed format for data sets that do not
  fit in memory: one record layout for images and one for sentence pairs, random access
  through grain's ``ArrayRecordDataSource``, errors that name the file and the record.
- ``pipelines.convert``: ``python -m pipelines.convert`` packs an image folder or a parallel
  text corpus into such files, once.
"""
