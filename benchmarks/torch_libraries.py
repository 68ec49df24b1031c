"""Imports timm beside a CPU build of PyTorch, for the programs that run in a PyTorch environment
(``benchmarks/timm_vit_throughput.py``, ``benchmarks/weights_against_torch.py``, ``tests/peer_check.py``);
the project never imports this.

PyPI's torchvision is a CUDA build. Beside the CPU torch of ``requirements-peer.txt`` its operator
library cannot load, which torchvision allows (its operators then raise when called, and timm's
ViTs call none), except that it registers two of them (``nms``, ``qnms``) regardless, and that
fails unless their schemas exist. They are declared first in that case only, without kernels.
"""

import ctypes
import importlib.util
import pathlib

_KEPT = []  # the schemas' library object: its definitions last while it does


def import_timm():
  """``timm``, imported once torchvision's two schemas are declared where its library cannot load."""
  import torch  # pylint: disable=g-import-not-at-top

  spec = importlib.util.find_spec('torchvision')
  library = next(pathlib.Path(spec.submodule_search_locations[0]).glob('_C*.so'), None) if spec else None
  try:
    if library is not None:
      ctypes.CDLL(str(library))
  except OSError:
    schemas = torch.library.Library('torchvision', 'DEF')
    for name in ('nms', 'qnms'):
      schemas.define(f'{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')
    _KEPT.append(schemas)
  import timm  # pylint: disable=g-import-not-at-top

  return timm
