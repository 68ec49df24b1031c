"""The model options a timm or Hugging Face weights file decides, filled into a config's ``model`` section.

``complete_model_config`` is what the ViT's ``model`` section reader (``vit.config_sections``) runs
when ``init_from`` names such a file: it reads the file's JSON and safetensors header only (no
weights), fills the fields the section leaves out or unset (``configs.common.unset``) with the
file's, and refuses in one line every field the section sets to something else.
"""

import ml_collections

from trainer.errors import ConfigError
from vit.model import decode_variant
from vit.weights import sources

# the model options a timm or transformers file decides (a patch size of its own may differ: resized)
FILE_DECIDES = (
  'width', 'depth', 'num_heads', 'mlp_dim', 'pool', 'posemb', 'activation', 'layernorm_epsilon',
  'reg_tokens', 'layer_scale', 'norm_pre', 'fc_norm', 'patch_bias',
)  # fmt: skip


def complete_model_config(
  model: ml_collections.ConfigDict, init_from: ml_collections.ConfigDict | None
) -> None:
  """``model`` (a config's section, in place) completed from a timm or transformers ``init_from``:
  the fields it leaves unset take the file's values; ``ConfigError`` listing the ones it contradicts.
  Only the file's JSON and header are read (``sources.read_weights(header_only=True)``)."""
  if init_from is None or not init_from.path or not sources.is_weights_path(init_from.path):
    return
  source = sources.read_weights(init_from.path, init_from.get('arch', ''), header_only=True)
  stated = {
    name: value for name, value in model.items() if value is not None
  }  # None: unset (configs.common.unset)
  if stated.get('variant', 'custom') != 'custom':
    stated.update(decode_variant(stated['variant']))
  differ = []
  for name in FILE_DECIDES:
    theirs = source.model.get(name)
    if theirs is None or name not in stated:
      continue
    ours = stated[name]
    same = bool(ours) == bool(theirs) if name == 'layer_scale' else ours == theirs
    if not same:
      differ.append(f'{name} {ours!r} (the file: {theirs!r})')
  if differ:
    raise ConfigError(
      f'config.model contradicts init_from {init_from.path}: {"; ".join(differ)}; leave these fields '
      "unset to take the file's."
    )
  with model.unlocked():
    if stated.get('variant', 'custom') != 'custom':
      model.variant = 'custom'
      for name in ('width', 'depth', 'num_heads', 'mlp_dim', 'patch_size'):
        model[name] = stated[name]
    for name in (*FILE_DECIDES, 'patch_size', 'pre_logits', 'distill_token'):
      if name not in stated and name in source.model:
        if name in model:
          del model[name]  # an unset field keeps its type; the file's value may be of another
        model[name] = source.model[name]
