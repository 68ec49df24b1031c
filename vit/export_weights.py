"""Writes a ViT of ours as a timm or Hugging Face transformers folder (``config.json`` + ``model.safetensors``).

  python -m vit.export_weights --workdir runs/vit_ft --to timm --arch vit_base_patch16_224 OUT
  python -m vit.export_weights --workdir runs/vit_ft --to transformers OUT

timm reads the folder with ``timm.create_model(ARCH, pretrained=True,
pretrained_cfg_overlay=dict(file='OUT/model.safetensors', source='file', num_classes=N), num_classes=N)``; transformers with
``ViTForImageClassification.from_pretrained('OUT')``. Both configs carry our class names and our
preprocessing (a bilinear resize to the model's size, the workdir's mean and std). ``--arch`` is the
timm architecture; by default the one the workdir was fine-tuned from (``init_from``), when that was a
timm source. The model's options must be that architecture's (a one-line error lists the
differences); a model with a distillation token (``distill_token``) is a distilled DeiT
(``deit_*_distilled_patch16_*``). transformers takes class-token ViTs without layer scale, registers,
``norm_pre``, ``fc_norm`` or attention pooling: ``ViTForImageClassification``, or with a distillation
token ``DeiTForImageClassificationWithTeacher`` (read with that class's ``from_pretrained``).
"""

import json
import pathlib

import numpy as np
from absl import app, flags

from trainer.command_line import cli
from trainer.errors import CheckpointError

_TRANSFORMERS_ACT = {'gelu_exact': 'gelu', 'gelu': 'gelu_pytorch_tanh', 'quick_gelu': 'quick_gelu'}


def model_options(model) -> dict:
  """The options of a built ``VisionTransformer`` that an exported folder must state."""
  from attention.layers import layer_of  # pylint: disable=g-import-not-at-top

  block = layer_of(model.encoder.blocks, 0)
  return dict(
    width=int(model.patch_embedding.kernel.shape[-1]),
    num_heads=int(block.attention.num_heads),
    depth=int(model.encoder.depth),
    mlp_dim=int(block.mlp.fc1.kernel.shape[1]),
    patch_size=int(model.patch_embedding.kernel.shape[0]),
    pool=model.pool,
    activation=block.mlp.activation,
    layernorm_epsilon=float(block.norm1.epsilon),
    reg_tokens=int(model.register_tokens.shape[1]) if hasattr(model, 'register_tokens') else 0,
    layer_scale=hasattr(block, 'ls1'),
    norm_pre=hasattr(model.encoder, 'norm_pre'),
    fc_norm=hasattr(model, 'fc_norm'),
    patch_bias=model.patch_embedding.bias is not None,
    pre_logits=hasattr(model, 'pre_logits'),
    distill_token=hasattr(model, 'distill_token'),
  )


def _canonical(model) -> dict[str, np.ndarray]:
  from vit import checkpoint_npz  # pylint: disable=g-import-not-at-top

  return checkpoint_npz.to_canonical(checkpoint_npz.model_to_official(model))


def write_timm(model, out, arch: str, *, image_size, mean, std, class_names=None) -> pathlib.Path:
  """``out/config.json`` and ``out/model.safetensors`` as timm's ``push_to_hub`` writes them."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top

  from vit import weights_timm  # pylint: disable=g-import-not-at-top

  architecture = weights_timm.resolve_architecture(arch)
  ours = model_options(model)
  declared = dict(architecture.options, layer_scale=bool(architecture.options.get('layer_scale')))
  declared.setdefault('reg_tokens', 0)
  for name in ('norm_pre', 'fc_norm'):
    declared.setdefault(name, False)
  declared.setdefault('patch_bias', True)
  differ = [
    f'{name} {ours[name]!r} (timm {arch}: {declared[name]!r})'
    for name in (
      'pool',
      'activation',
      'layernorm_epsilon',
      'reg_tokens',
      'layer_scale',
      'norm_pre',
      'patch_bias',
      'distill_token',
    )
    if ours[name] != declared[name]
  ]
  if ours['pre_logits']:
    differ.append('pre_logits (timm has none)')
  if ours['fc_norm'] and ours['pool'] != 'gap':
    differ.append('fc_norm without average pooling')
  if differ:
    raise CheckpointError(f'export: the model is not a timm {arch}: {"; ".join(differ)}.')
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  arrays = weights_timm.from_canonical(_canonical(model), no_embed_class=architecture.no_embed_class)
  save_file(arrays, str(out / 'model.safetensors'))
  num_classes = int(model.head.kernel.shape[1])
  model_args = {'img_size': list(image_size)}
  for theirs, name in (('embed_dim', 'width'), ('num_heads', 'num_heads'), ('patch_size', 'patch_size')):
    if ours[name] != declared[name]:
      model_args[theirs] = ours[name]
  model_args['depth'] = ours['depth']
  channels = int(model.patch_embedding.kernel.shape[2])
  if channels != 3:
    model_args['in_chans'] = channels
  model_args['mlp_ratio'] = ours['mlp_dim'] / ours['width']
  if ours['fc_norm']:
    model_args['fc_norm'] = True
  config = {
    'architecture': architecture.name,
    'num_classes': num_classes,
    'num_features': ours['width'],
    'global_pool': {'cls': 'token', 'gap': 'avg', 'map': 'map'}[ours['pool']],
    'model_args': model_args,
    'pretrained_cfg': {
      'input_size': [channels, *image_size],
      'interpolation': 'bilinear',
      'crop_pct': 1.0,
      'crop_mode': 'squash',
      'mean': list(mean),
      'std': list(std),
      'num_classes': num_classes,
      'classifier': ['head', 'head_dist'] if ours['distill_token'] else 'head',
    },
  }
  if class_names:
    config['label_names'] = list(class_names)
  (out / 'config.json').write_text(json.dumps(config, indent=2))
  return out


def write_transformers(model, out, *, image_size, mean, std, class_names=None) -> pathlib.Path:
  """``out/config.json``, ``model.safetensors`` and ``preprocessor_config.json`` of a ``ViTForImageClassification``
  (with a distillation token: a ``DeiTForImageClassificationWithTeacher``)."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top

  from vit import weights_transformers  # pylint: disable=g-import-not-at-top

  ours = model_options(model)
  extras = [name for name in ('reg_tokens', 'layer_scale', 'norm_pre', 'fc_norm', 'pre_logits') if ours[name]]
  if ours['pool'] != 'cls' or not ours['patch_bias'] or extras or image_size[0] != image_size[1]:
    raise CheckpointError(
      'export: transformers ViTForImageClassification has a class token, a patch bias, a square image and '
      f'none of registers, layer scale, norm_pre, fc_norm, pre_logits; this model: pool {ours["pool"]!r}, '
      f'patch bias {ours["patch_bias"]}, {", ".join(extras) or "no extras"}, image {tuple(image_size)}.'
    )
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  deit = ours['distill_token']
  arrays = weights_transformers.from_canonical(_canonical(model), prefix='deit.' if deit else 'vit.')
  save_file(arrays, str(out / 'model.safetensors'), metadata={'format': 'pt'})
  num_classes = int(model.head.kernel.shape[1])
  names = list(class_names) if class_names else [str(i) for i in range(num_classes)]
  config = {
    'architectures': ['DeiTForImageClassificationWithTeacher' if deit else 'ViTForImageClassification'],
    'model_type': 'deit' if deit else 'vit',
    'hidden_size': ours['width'],
    'num_hidden_layers': ours['depth'],
    'num_attention_heads': ours['num_heads'],
    'intermediate_size': ours['mlp_dim'],
    'hidden_act': _TRANSFORMERS_ACT[ours['activation']],
    'hidden_dropout_prob': 0.0,
    'attention_probs_dropout_prob': 0.0,
    'initializer_range': 0.02,
    'layer_norm_eps': ours['layernorm_epsilon'],
    'image_size': int(image_size[0]),
    'patch_size': ours['patch_size'],
    'num_channels': int(model.patch_embedding.kernel.shape[2]),
    'qkv_bias': True,
    'encoder_stride': ours['patch_size'],
    'id2label': {str(i): name for i, name in enumerate(names)},
    'label2id': {name: i for i, name in enumerate(names)},
  }
  (out / 'config.json').write_text(json.dumps(config, indent=2))
  processor = {
    'image_processor_type': 'DeiTImageProcessor' if deit else 'ViTImageProcessor',
    'do_resize': True,
    'size': {'height': int(image_size[0]), 'width': int(image_size[1])},
    'resample': 2,
    'do_rescale': True,
    'rescale_factor': 1 / 255,
    'do_normalize': True,
    'image_mean': list(mean),
    'image_std': list(std),
  }
  if deit:  # DeiTImageProcessor crops by default
    processor['do_center_crop'] = False
  (out / 'preprocessor_config.json').write_text(json.dumps(processor, indent=2))
  return out


def export(workdir: str, to: str, out: str, arch: str = '', checkpoint: str = 'latest') -> str:
  from trainer.evaluation import restore_checkpoint  # pylint: disable=g-import-not-at-top
  from trainer.io import storage  # pylint: disable=g-import-not-at-top
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  which = int(checkpoint) if checkpoint.isdigit() else checkpoint
  path = storage.as_path(workdir)
  task, parts, params, step = restore_checkpoint(path, which, read_data=False)
  model = parts.merge(params)
  prep = task.preparation
  options = dict(
    image_size=tuple(task.sizes.image_shape[:2]),
    mean=prep.mean,
    std=prep.std,
    class_names=workdir_lib.load_class_names(path),
  )
  if to == 'transformers':
    write_transformers(model, out, **options)
  elif to == 'timm':
    init_from = task.config.get('init_from') or {}
    arch = arch or init_from.get('arch', '') or _timm_arch_of(init_from.get('path', ''))
    if not arch:
      raise CheckpointError('export: name the timm architecture with --arch (e.g. vit_base_patch16_224).')
    write_timm(model, out, arch, **options)
  else:
    raise CheckpointError(f'export: --to is {to!r}; allowed values: timm, transformers.')
  return f'wrote step {step} of {workdir} to {out} ({to})'


def _timm_arch_of(path: str) -> str:
  config = pathlib.Path(path) / 'config.json' if path else None
  if config is None or not config.is_file():
    return ''
  return json.loads(config.read_text()).get('architecture', '')


def run() -> None:
  """The command; its flags are defined here, so importing ``export`` defines none."""
  workdir = flags.DEFINE_string('workdir', None, 'A workdir written by train.py with a ViT config.')
  to = flags.DEFINE_enum('to', None, ['timm', 'transformers'], 'The layout to write.')
  arch = flags.DEFINE_string('arch', '', 'timm: the architecture name (default: the init_from source).')
  checkpoint = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
  flags.mark_flags_as_required(['workdir', 'to'])

  def main(argv):
    if len(argv) != 2:
      raise app.UsageError('Give one output folder: python -m vit.export_weights --workdir W --to timm OUT')
    cli.quiet_library_logs()
    print(
      cli.run_reporting_user_errors(export, workdir.value, to.value, argv[1], arch.value, checkpoint.value)
    )

  app.run(main)


if __name__ == '__main__':
  run()
