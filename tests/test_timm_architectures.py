"""``vit.weights.timm_architectures`` writes its table from timm's source: each registered function's
``model_args`` (a layer class kept as the fact it stands for) and each tag's preprocessing, with the
default tag timm's registry picks. Checked on a small file in timm's form."""

import textwrap

from vit.weights import timm_architectures

SOURCE = """
from functools import partial
from timm.data import IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD


def _cfg(url: str = '', **kwargs):
    return {
        'url': url, 'num_classes': 1000, 'input_size': (3, 224, 224), 'crop_pct': 0.9,
        'interpolation': 'bicubic', 'mean': IMAGENET_INCEPTION_MEAN, 'std': IMAGENET_INCEPTION_STD, **kwargs,
    }


default_cfgs = {
    'vit_a_patch16_224.untrained': _cfg(),
    'vit_a_patch16_224.first': _cfg(hf_hub_id='timm/', crop_pct=1.0),
    'vit_a_patch16_224.second': _cfg(hf_hub_id='timm/', mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD),
    'vit_b_patch16_224.one': _cfg(hf_hub_id='timm/'),
    'vit_b_patch16_224.chosen*': _cfg(hf_hub_id='timm/', input_size=(3, 256, 256)),
}
default_cfgs = generate_default_cfgs(default_cfgs)


@register_model
def vit_a_patch16_224(pretrained=False, **kwargs):
    model_args = dict(patch_size=16, embed_dim=64, depth=2, num_heads=4, norm_layer=partial(LayerNorm, eps=1e-5),
                      mlp_ratio=48 / 11, act_layer='gelu_tanh')
    return _create_vision_transformer('vit_a_patch16_224', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def vit_b_patch16_224(pretrained=False, **kwargs):
    model_args = dict(patch_size=16, embed_dim=64, depth=2, num_heads=4, mlp_layer=SwiGLUPacked, norm_layer=nn.LayerNorm)
    return _create_deit('vit_b_patch16_224', pretrained=pretrained, distilled=True, **dict(model_args, **kwargs))
"""


def test_the_table_holds_what_timms_source_says(tmp_path):
  (tmp_path / 'vision_transformer.py').write_text(textwrap.dedent(SOURCE))
  (tmp_path / 'deit.py').write_text('')
  table = timm_architectures.build(tmp_path)
  a, b = table['vit_a_patch16_224'], table['vit_b_patch16_224']
  assert a['model_args'] == dict(
    patch_size=16, embed_dim=64, depth=2, num_heads=4, norm_layer={'norm_eps': 1e-5}, mlp_ratio=48 / 11,
    act_layer='gelu_tanh',
  )  # fmt: skip
  assert b['model_args']['mlp_layer'] == {'unsupported': 'SwiGLUPacked'}
  assert b['model_args']['norm_layer'] == {'norm_eps': 1e-5} and b['distilled'] and not a['distilled']
  assert a['default_tag'] == 'first' and b['default_tag'] == 'chosen'  # the first with weights; a starred one
  assert a['tags']['first']['crop_pct'] == 1.0 and a['tags']['first']['mean'] == [0.5, 0.5, 0.5]
  assert a['tags']['second']['mean'] == [0.48145466, 0.4578275, 0.40821073]
  assert a['tags']['second']['crop_mode'] == 'center' and b['tags']['chosen']['input_size'] == [3, 256, 256]


def test_the_stored_table_has_timms_default_preprocessing():
  """Each family's default tag as timm 1.0 has it (the JSON in the repository)."""
  cfg = timm_architectures.pretrained_cfg
  assert (cfg('vit_tiny_patch16_224')['mean'], cfg('vit_tiny_patch16_224')['crop_pct']) == ([0.5] * 3, 0.9)
  assert cfg('deit_tiny_patch16_224')['mean'] == [0.485, 0.456, 0.406]
  assert cfg('vit_small_patch14_dinov2')['crop_pct'] == 1.0
  assert cfg('vit_base_patch16_clip_224.openai_ft_in1k')['std'] == [0.26862954, 0.26130258, 0.27577711]
  assert timm_architectures.architecture('deit_base_distilled_patch16_224')['distilled']
