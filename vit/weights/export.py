"""Writes a ViT of ours as a timm or Hugging Face transformers folder (``config.json`` + ``model.safetensors``).

  python -m vit.weights.export --workdir runs/vit_ft --to timm OUT
  python -m vit.weights.export --workdir runs/vit_ft --to transformers OUT

timm: ``config.json`` names an ``architecture`` and gives ``model_args`` stating the whole model (sizes,
pooling, class token, registers, ``pre_norm``, ``fc_norm``, layer scale, ``act_layer``), as timm's
``push_to_hub(model_args=...)`` writes them. ``timm.create_model('local-dir:OUT')`` reads the folder
whole; or ``timm.create_model(config['architecture'], pretrained=True,
pretrained_cfg_overlay=dict(file='OUT/model.safetensors'), **config['model_args'])``. The
architecture supplies only what ``model_args`` cannot say in JSON (``base_architecture``): the class of
a distilled DeiT (two heads) and CLIP's LayerNorm epsilon 1e-5; ``--arch`` names another, which
must build the same model (the folder is read back before it is written, and a one-line error lists
what would differ). transformers reads its folder with ``ViTForImageClassification.from_pretrained('OUT')``;
it takes class-token ViTs without layer scale, registers, ``norm_pre``, ``fc_norm`` or attention
pooling, or with a distillation token ``DeiTForImageClassificationWithTeacher``. Both configs carry
our class names and our preprocessing (a bilinear resize to the model's size, the workdir's mean and std).
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
    reg_tokens=int(model.register_tokens.shape[1]) if model.register_tokens is not None else 0,
    layer_scale=block.ls1 is not None,
    norm_pre=model.encoder.norm_pre is not None,
    fc_norm=model.fc_norm is not None,
    patch_bias=model.patch_embedding.bias is not None,
    pre_logits=model.pre_logits is not None,
    distill_token=model.distill_token is not None,
    learned_positions=(model.encoder.positional.kind, model.encoder.positional.injection)
    == ('learn1d', 'stem'),
  )


def _canonical(model) -> dict[str, np.ndarray]:
  from vit.weights import checkpoint_npz  # pylint: disable=g-import-not-at-top

  return checkpoint_npz.to_canonical(checkpoint_npz.model_to_official(model))


_TIMM_ACT = {'gelu_exact': 'gelu', 'gelu': 'gelu_tanh', 'quick_gelu': 'quick_gelu'}
_TIMM_POOL = {'cls': 'token', 'gap': 'avg', 'map': 'map'}


def base_architecture(ours: dict) -> str:
  """The timm architecture whose code gives what ``model_args`` cannot say in JSON: the class (a
  distilled DeiT's two heads) and the LayerNorm epsilon (CLIP's 1e-5, every other ViT's 1e-6)."""
  if ours['distill_token']:
    return 'deit_base_distilled_patch16_224'
  return 'vit_base_patch16_clip_224' if ours['layernorm_epsilon'] == 1e-5 else 'vit_base_patch16_224'


def timm_model_args(ours: dict, *, image_size, channels: int) -> dict:
  """Every ``VisionTransformer`` argument that describes our model, so no default of the architecture's
  matters; one line for what timm's ViT has no argument for."""
  problems = []
  if ours['pre_logits']:
    problems.append('pre_logits (timm has none)')
  if ours['norm_pre'] and ours['patch_bias']:
    problems.append('norm_pre with a patch bias (timm drops the bias with pre_norm)')
  if ours['distill_token'] and (ours['pool'] != 'cls' or ours['reg_tokens'] or ours['fc_norm']):
    problems.append('a distillation token without class-token pooling, or with registers or fc_norm')
  if ours['layernorm_epsilon'] not in (1e-6, 1e-5):
    problems.append(f'layernorm_epsilon {ours["layernorm_epsilon"]!r} (timm ViTs: 1e-6, CLIP 1e-5)')
  if not ours['learned_positions']:
    problems.append('a position encoding other than a learned table added at the stem')
  mlp_ratio = ours['mlp_dim'] / ours['width']
  if int(ours['width'] * mlp_ratio) != ours['mlp_dim']:
    problems.append(
      f'mlp_dim {ours["mlp_dim"]} (int(width * mlp_ratio) gives {int(ours["width"] * mlp_ratio)})'
    )
  if problems:
    raise CheckpointError(f'export: timm has no ViT with {"; ".join(problems)}.')
  return dict(
    img_size=list(image_size), patch_size=ours['patch_size'], in_chans=channels, embed_dim=ours['width'],
    depth=ours['depth'], num_heads=ours['num_heads'], mlp_ratio=mlp_ratio, qkv_bias=True,
    class_token=ours['pool'] == 'cls', global_pool=_TIMM_POOL[ours['pool']], reg_tokens=ours['reg_tokens'],
    no_embed_class=False, pre_norm=ours['norm_pre'], fc_norm=ours['fc_norm'],
    init_values=1e-5 if ours['layer_scale'] else None, act_layer=_TIMM_ACT[ours['activation']],
  )  # fmt: skip


def write_timm(model, out, arch: str = '', *, image_size, mean, std, class_names=None) -> pathlib.Path:
  """``out/config.json`` and ``out/model.safetensors`` as timm's ``push_to_hub`` writes them, with
  ``model_args`` stating the whole model over ``arch`` (default: ``base_architecture``); the folder is
  read back first, and one line lists what would differ."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top

  from vit.weights import timm_layout  # pylint: disable=g-import-not-at-top

  ours = model_options(model)
  channels = int(model.patch_embedding.kernel.shape[2])
  model_args = timm_model_args(ours, image_size=image_size, channels=channels)
  name = (arch or base_architecture(ours)).partition('.')[0]
  try:
    # the architecture's own table layout, so that its name alone (without model_args) reads the arrays
    model_args['no_embed_class'] = bool(timm_layout.model_args(name)['no_embed_class'])
    rebuilt = timm_layout.resolve(name, model_args)
  except CheckpointError as error:
    raise CheckpointError(f'export: the model is not a timm {name}: {error}') from None
  expected = dict(ours, layer_scale=bool(ours['layer_scale']))
  got = dict(rebuilt.options, layer_scale=bool(rebuilt.options['layer_scale']))
  differ = [
    f'{key} {expected[key]!r} (timm {name}: {got[key]!r})'
    for key in got
    if key in expected and got[key] != expected[key]
  ]
  if differ:
    raise CheckpointError(f'export: the model is not a timm {name}: {"; ".join(differ)}.')
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  canonical = _canonical(model)
  if not ours['patch_bias'] and not ours['norm_pre']:  # timm has a patch bias here: a zero one
    canonical['embedding/bias'] = np.zeros(ours['width'], np.float32)
  arrays = timm_layout.from_canonical(canonical, no_embed_class=model_args['no_embed_class'])
  save_file(arrays, str(out / 'model.safetensors'))
  num_classes = int(model.head.kernel.shape[1])
  config = {
    'architecture': name,
    'num_classes': num_classes,
    'num_features': ours['width'],
    'global_pool': model_args['global_pool'],
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

  from vit.weights import transformers_layout  # pylint: disable=g-import-not-at-top

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
  arrays = transformers_layout.from_canonical(_canonical(model), prefix='deit.' if deit else 'vit.')
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
    write_timm(model, out, arch, **options)
  else:
    raise CheckpointError(f'export: --to is {to!r}; allowed values: timm, transformers.')
  return f'wrote step {step} of {workdir} to {out} ({to})'


def run() -> None:
  """The command; its flags are defined here, so importing ``export`` defines none."""
  workdir = flags.DEFINE_string('workdir', None, 'A workdir written by train.py with a ViT config.')
  to = flags.DEFINE_enum('to', None, ['timm', 'transformers'], 'The layout to write.')
  arch = flags.DEFINE_string(
    'arch',
    '',
    'timm: the architecture named in config.json (default: chosen from the model; model_args say the rest).',
  )
  checkpoint = flags.DEFINE_string('checkpoint', 'latest', "'latest', 'best', or a step number.")
  flags.mark_flags_as_required(['workdir', 'to'])

  def main(argv):
    if len(argv) != 2:
      raise app.UsageError('Give one output folder: python -m vit.weights.export --workdir W --to timm OUT')
    cli.quiet_library_logs()
    print(
      cli.run_reporting_user_errors(export, workdir.value, to.value, argv[1], arch.value, checkpoint.value)
    )

  app.run(main)


if __name__ == '__main__':
  run()
