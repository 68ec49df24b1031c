"""Our timm and Hugging Face weights against the real libraries, at the tiny sizes of ``tests/test_vit_weights.py``.

  python -m venv /tmp/torch-env && /tmp/torch-env/bin/pip install -r requirements-peer.txt safetensors
  python benchmarks/weights_against_torch.py export DIR            # our venv: export ours, save our logits
  /tmp/torch-env/bin/python benchmarks/weights_against_torch.py torch DIR   # theirs: load ours, write theirs
  python benchmarks/weights_against_torch.py read DIR              # our venv: read theirs, compare

``export`` writes, for each timm architecture family of the tests (the distilled DeiT included), for
``ViTForImageClassification`` and for ``DeiTForImageClassificationWithTeacher``, a model of ours
(random weights) with ``vit.weights.export`` and our logits on two random images. ``torch`` loads
each with ``timm.create_model(..., pretrained=True, pretrained_cfg_overlay=...)`` and the
transformers class's ``from_pretrained``, prints the largest difference from our logits and the
loading warnings (and keeps them in ``DIR/torch_side.json``), then writes folders with timm's
``save_for_hf`` and transformers' ``save_pretrained`` (random weights; transformers' folders twice,
with the hub's names and, ``save_original_format=False``, with the names transformers 5 holds in
memory) with their outputs. ``read`` reads those with ``vit.weights.sources``, prints the largest
difference of our outputs from theirs, then all the numbers as one JSON object on its last line
(for ``python -m records.record``). Not part of the test suite (it needs PyTorch).
"""

import json
import pathlib
import sys
import warnings

import numpy as np

SIZES = dict(embed_dim=24, depth=2, num_heads=3, patch_size=4, img_size=16, mlp_ratio=40 / 24)
REAL_TIMM = [
  'vit_base_patch16_224',
  'deit3_base_patch16_224',
  'vit_small_patch14_reg4_dinov2',
  'vit_base_patch16_siglip_224',
  'vit_base_patch16_clip_quickgelu_224',
  'deit_small_distilled_patch16_224',
]
HF_CLASSES = {'hf': 'ViTForImageClassification', 'hf_teacher': 'DeiTForImageClassificationWithTeacher'}


def export(root: pathlib.Path) -> None:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from tests import test_vit_weights as t  # pylint: disable=g-import-not-at-top
  from vit.weights import export, sources  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  images = rng.uniform(-1, 1, (2, t.IMAGE, t.IMAGE, 3)).astype(np.float32)
  np.save(root / 'images.npy', images)
  common = dict(image_size=(t.IMAGE, t.IMAGE), mean=(0.5,) * 3, std=(0.5,) * 3, class_names=list('abcde'))
  cases = {}
  for arch, (options, *_) in t.TIMM_CASES.items():
    source = t.write_timm_folder(root / 'src' / arch, t.timm_arrays(rng, **options), arch)
    model = t._model_from(sources.read_weights(source))  # pylint: disable=protected-access
    out = export.write_timm(model, root / 'timm' / arch, arch, **common)
    np.save(out / 'ours_logits.npy', np.asarray(model(images)[0]))
    cases[arch] = str(out)
  hf = {}
  for name, model_type in (('hf', 'vit'), ('hf_teacher', 'deit')):
    arrays = t.transformers_arrays(rng, prefix=f'{model_type}.', teacher=model_type == 'deit')
    source = t.write_transformers_folder(root / 'src' / name, arrays, t.transformers_config(model_type))
    model = t._model_from(sources.read_weights(source))  # pylint: disable=protected-access
    out = export.write_transformers(model, root / name, **common)
    np.save(out / 'ours_logits.npy', np.asarray(model(images)[0]))
    hf[name] = str(out)
  (root / 'cases.json').write_text(json.dumps(dict(timm=cases, **hf)))


def against_torch(root: pathlib.Path) -> None:
  import torch  # pylint: disable=g-import-not-at-top
  import torch_libraries  # pylint: disable=g-import-not-at-top  (beside this file, which runs as a script)
  import transformers  # pylint: disable=g-import-not-at-top

  timm = torch_libraries.import_timm()
  from timm.models._hub import save_for_hf  # pylint: disable=g-import-not-at-top

  print('torch', torch.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__)
  measured = {'timm_loads_ours': {}, 'transformers_loads_ours': {}}
  cases = json.loads((root / 'cases.json').read_text())
  images = torch.from_numpy(np.load(root / 'images.npy')).permute(0, 3, 1, 2)
  for arch, out in cases['timm'].items():
    out = pathlib.Path(out)
    overlay = dict(file=str(out / 'model.safetensors'), source='file', num_classes=5)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      model = timm.create_model(arch, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=5, **SIZES)
    with torch.no_grad():
      logits = model.eval()(images).numpy()
    ours = np.load(out / 'ours_logits.npy')
    difference = float(np.abs(logits - ours).max())
    measured['timm_loads_ours'][arch] = {'max_abs_difference': difference, 'warnings': len(caught)}
    print(f'timm loads ours, {arch}: max |timm - ours| {difference:.1e}; warnings {len(caught)}')
  for name, class_name in HF_CLASSES.items():
    model, info = getattr(transformers, class_name).from_pretrained(cases[name], output_loading_info=True)
    with torch.no_grad():
      logits = model.eval()(pixel_values=images).logits.numpy()
    ours = np.load(pathlib.Path(cases[name]) / 'ours_logits.npy')
    difference = float(np.abs(logits - ours).max())
    keys = {
      kind: len(info.get(kind) or ()) for kind in ('missing_keys', 'unexpected_keys', 'mismatched_keys')
    }
    measured['transformers_loads_ours'][class_name] = {'max_abs_difference': difference, **keys}
    print(f'transformers loads ours, {class_name}: max |hf - ours| {difference:.1e}; {info}')
  (root / 'torch_side.json').write_text(json.dumps(measured))
  real = root / 'real'
  torch.manual_seed(0)

  def randomised(model):
    with torch.no_grad():
      for parameter in model.parameters():
        parameter.add_(0.2 * torch.randn_like(parameter))  # zero-initialised heads and tokens too
    return model.eval()

  for arch in REAL_TIMM:
    model = randomised(timm.create_model(arch, num_classes=5, **SIZES))
    with torch.no_grad():
      logits = model(images).numpy()
    save_for_hf(
      model,
      real / arch,
      model_config={'label_names': list('abcde')},
      model_args=SIZES,
      safe_serialization=True,
    )
    np.save(real / arch / 'torch_outputs.npy', logits)
  common = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=3, image_size=16, patch_size=4)
  for name, model in (
    ('ViTForImageClassification', transformers.ViTForImageClassification(transformers.ViTConfig(intermediate_size=40, num_labels=5, **common))),
    ('ViTModel', transformers.ViTModel(transformers.ViTConfig(intermediate_size=40, **common))),
    ('DeiTForImageClassification', transformers.DeiTForImageClassification(transformers.DeiTConfig(intermediate_size=40, num_labels=5, **common))),
    ('DeiTForImageClassificationWithTeacher', transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(intermediate_size=40, num_labels=5, **common))),
    ('Dinov2Model', transformers.Dinov2Model(transformers.Dinov2Config(mlp_ratio=2, **common))),
  ):  # fmt: skip
    with torch.no_grad():
      outputs = randomised(model)(pixel_values=images)
    theirs = (outputs.logits if hasattr(outputs, 'logits') else outputs.pooler_output).numpy()
    for folder, original in ((name, True), (f'{name}-transformers5-names', False)):
      model.save_pretrained(real / folder, save_original_format=original)  # False: its in-memory names
      np.save(real / folder / 'torch_outputs.npy', theirs)


def read(root: pathlib.Path) -> None:
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from flax import nnx  # pylint: disable=g-import-not-at-top

  from vit.model import make_vit  # pylint: disable=g-import-not-at-top
  from vit.weights import checkpoint_npz, sources  # pylint: disable=g-import-not-at-top

  images = np.load(root / 'images.npy')
  measured = json.loads((root / 'torch_side.json').read_text()) | {'we_read_theirs': {}}
  for folder in sorted((root / 'real').iterdir()):
    source = sources.read_weights(folder)
    shape = (*source.image_size, source.channels)
    model = make_vit(
      source.model, num_classes=max(source.num_classes, 1), image_shape=shape, rngs=nnx.Rngs(0)
    )
    checkpoint_npz.canonical_to_model(model, source.canonical)
    logits, intermediates = model(images)
    ours = np.asarray(logits if source.num_classes else intermediates['pre_logits'])
    theirs = np.load(folder / 'torch_outputs.npy')
    what = 'logits' if source.num_classes else 'pooled features'
    difference = float(np.abs(ours - theirs).max())
    measured['we_read_theirs'][folder.name] = {'max_abs_difference': difference}
    print(f'we read theirs, {folder.name}: max |ours - theirs| {what} {difference:.1e}')
  for direction, cases in list(measured.items()):
    if not cases:
      raise SystemExit(f'{root}: no case of {direction}; run the export and torch steps first')
    measured[f'largest_difference_{direction}'] = max(case['max_abs_difference'] for case in cases.values())
    measured[f'cases_{direction}'] = len(cases)
  measured['loading_warnings'] = sum(case.get('warnings', 0) for case in measured['timm_loads_ours'].values())
  measured['transformers_key_problems'] = sum(
    case[kind]
    for case in measured['transformers_loads_ours'].values()
    for kind in ('missing_keys', 'unexpected_keys', 'mismatched_keys')
  )
  print(json.dumps(measured))  # the numbers, on the last line, for records.record


if __name__ == '__main__':
  phase, directory = sys.argv[1], pathlib.Path(sys.argv[2])
  directory.mkdir(parents=True, exist_ok=True)
  {'export': export, 'torch': against_torch, 'read': read}[phase](directory)
