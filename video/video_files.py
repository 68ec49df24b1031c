"""The frames of a video file (``.mp4``, ``.mov``, ``.avi``, ``.mkv``, ``.webm``), decoded with PyAV.

PyAV (``av``) is imported only when a video file is read, so nothing else pays for FFmpeg's libraries.
"""

from collections.abc import Iterator

import numpy as np

from trainer.errors import DataError

VIDEO_SUFFIXES = ('.mp4', '.mov', '.avi', '.mkv', '.webm')


def video_frames(path: str) -> Iterator[np.ndarray]:
  """The frames of the file's first video stream in order, each uint8 RGB ``[H, W, 3]``, decoded as they
  are asked for (a reader that stops early decodes no more). A file FFmpeg cannot read, or without a
  video stream, raises ``DataError`` naming it."""
  import av  # pylint: disable=g-import-not-at-top  (only for video files)

  try:
    with av.open(path) as container:
      if not container.streams.video:
        raise DataError(f'{path}: no video stream in the file')
      for frame in container.decode(container.streams.video[0]):
        yield frame.to_ndarray(format='rgb24')
  except av.error.FFmpegError as error:
    raise DataError(f'{path}: cannot read the video ({error.strerror or error})') from None
