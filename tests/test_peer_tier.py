"""The peer tier stays apart: PyTorch, timm, transformers and torchvision are imported only by
``tests/peer_check.py`` (run by ``.ci/peer`` in ``.venv-peer``) and by the benchmarks that say they
run in an environment with PyTorch; the project and its main test suite import none of them."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEER_LIBRARIES = {'torch', 'timm', 'transformers', 'torchvision'}
ALLOWED = {
  'tests/peer_check.py',
  'benchmarks/weights_against_torch.py',
  'benchmarks/timm_vit_throughput.py',
  'benchmarks/torch_libraries.py',
}


def _imported(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names |= {alias.name.split('.')[0] for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module.split('.')[0])
  return names


def test_only_the_peer_check_imports_the_peer_libraries():
  files = [
    p for p in ROOT.rglob('*.py') if not any(part.startswith('.') for part in p.relative_to(ROOT).parts)
  ]
  offenders = {
    str(p.relative_to(ROOT)): sorted(_imported(p) & PEER_LIBRARIES)
    for p in files
    if str(p.relative_to(ROOT)) not in ALLOWED and _imported(p) & PEER_LIBRARIES
  }
  assert offenders == {}
  assert all(PEER_LIBRARIES & _imported(ROOT / name) for name in ALLOWED)  # the list names real importers
