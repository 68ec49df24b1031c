"""timm's ViT architectures as timm's own source defines them: each name's ``model_args`` and the
preprocessing of each of its pretrained tags, read from ``timm_architectures.json``.

``timm.create_model(name, **model_args)`` builds ``VisionTransformer(**dict(NAME_ARGS, **model_args))``,
where ``NAME_ARGS`` is the ``model_args`` dict in the name's function in ``vision_transformer.py`` or
``deit.py``; a tag's preprocessing is its ``_cfg(...)`` in ``default_cfgs``, and a name's default tag is
the one ``timm.models._registry.generate_default_cfgs`` picks (a tag ending in ``*``, else the first
with weights). The JSON holds both, written from timm's source by this module run as a script, so
no PyTorch or timm is needed to read it (the JSON here is timm 1.0.31's, the version the checks
against the real library pin):

  python -m vit.weights.timm_architectures path/to/site-packages/timm/models

A value timm passes as a class (a norm layer, an MLP, a block) is kept as the fact it stands for: a
LayerNorm's epsilon becomes ``norm_eps``, anything else ``unsupported`` naming it.
"""

import ast
import collections
import functools
import json
import pathlib
import sys

TABLE = pathlib.Path(__file__).with_name('timm_architectures.json')
_CONSTANTS = {
  'IMAGENET_DEFAULT_MEAN': (0.485, 0.456, 0.406),
  'IMAGENET_DEFAULT_STD': (0.229, 0.224, 0.225),
  'IMAGENET_INCEPTION_MEAN': (0.5, 0.5, 0.5),
  'IMAGENET_INCEPTION_STD': (0.5, 0.5, 0.5),
  'OPENAI_CLIP_MEAN': (0.48145466, 0.4578275, 0.40821073),
  'OPENAI_CLIP_STD': (0.26862954, 0.26130258, 0.27577711),
}
_CFG_FIELDS = ('input_size', 'crop_pct', 'crop_mode', 'interpolation', 'mean', 'std', 'num_classes')
_WEIGHTS_FIELDS = ('url', 'file', 'hf_hub_id')  # timm's PretrainedCfg.has_weights


@functools.cache
def table() -> dict:
  return json.loads(TABLE.read_text())


def architecture(name: str) -> dict | None:
  """``{'model_args', 'distilled', 'tags', 'default_tag'}`` of a timm name (a ``.tag`` dropped), or None."""
  return table().get(name.partition('.')[0])


def pretrained_cfg(name: str) -> dict | None:
  """The preprocessing fields of ``name``'s tag (its default tag when it names none), or None."""
  base, _, tag = name.partition('.')
  entry = table().get(base)
  if entry is None:
    return None
  return entry['tags'].get(tag or entry['default_tag'])


# Writing the table from timm's source ----------------------------------------------------------------


def _value(node: ast.AST):
  """A literal, a named constant, or the fact a layer class stands for (``('norm_eps', x)``,
  ``('unsupported', text)``)."""
  try:
    return ast.literal_eval(node)
  except ValueError:
    pass
  text = ast.unparse(node)
  if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
    left, right = _value(node.left), _value(node.right)
    if all(isinstance(v, (int, float)) for v in (left, right)):
      return left * right if isinstance(node.op, ast.Mult) else left / right
  if isinstance(node, ast.Name) and node.id in _CONSTANTS:
    return _CONSTANTS[node.id]
  if text in ('nn.LayerNorm', 'LayerNorm'):
    return ('norm_eps', 1e-5 if text == 'nn.LayerNorm' else 1e-6)
  if isinstance(node, ast.Call) and ast.unparse(node.func) == 'partial' and node.args:
    layer = ast.unparse(node.args[0])
    eps = [k.value for k in node.keywords if k.arg == 'eps']
    if layer in ('nn.LayerNorm', 'LayerNorm') and len(node.keywords) == len(eps) == 1:
      return ('norm_eps', ast.literal_eval(eps[0]))
  return ('unsupported', text)


def _cfg_call(node: ast.Call, defaults: dict) -> dict:
  cfg = dict(defaults)
  for keyword in node.keywords:
    if keyword.arg:
      cfg[keyword.arg] = _value(keyword.value)
  return cfg


def _read_module(path: pathlib.Path) -> tuple[dict, dict]:
  """``{name: {'model_args', 'distilled'}}`` and ``{'name.tag': cfg}`` of one timm model file."""
  source_text = path.read_text()
  tree = ast.parse(source_text)
  defaults, architectures, cfgs = {}, {}, {}
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name == '_cfg':
      returned = next(n for n in ast.walk(node) if isinstance(n, ast.Return)).value
      parameters = dict(zip([a.arg for a in node.args.args][-len(node.args.defaults) :], node.args.defaults))
      defaults = {
        ast.literal_eval(k): _value(parameters.get(getattr(v, 'id', None), v))
        for k, v in zip(returned.keys, returned.values, strict=True)
        if k
      }
      defaults['crop_mode'] = 'center'  # timm.data.constants.DEFAULT_CROP_MODE
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and any(
      ast.unparse(d) == 'register_model' for d in node.decorator_list
    ):
      for statement in node.body:
        if (
          isinstance(statement, ast.Assign)
          and ast.unparse(statement.targets[0]) == 'model_args'
          and isinstance(statement.value, ast.Call)
          and ast.unparse(statement.value.func) == 'dict'
        ):
          model_args = {k.arg: _value(k.value) for k in statement.value.keywords}
          source = ast.unparse(node)
          architectures[node.name] = dict(model_args=model_args, distilled='distilled=True' in source)
    elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == 'default_cfgs':
      mapping = node.value.args[0] if isinstance(node.value, ast.Call) else node.value
      if not isinstance(mapping, ast.Dict):
        continue  # ``default_cfgs = generate_default_cfgs(default_cfgs)``
      for key, value in zip(mapping.keys, mapping.values, strict=True):
        if isinstance(value, ast.Call) and ast.unparse(value.func) == '_cfg':
          cfgs[ast.literal_eval(key)] = _cfg_call(value, defaults)
  if '_quick_gelu_cfgs' in source_text:  # vision_transformer.py copies each CLIP tag noted QuickGELU
    for key, cfg in list(cfgs.items()):
      notes = cfg.get('notes') or ('',)
      if 'quickgelu' in notes[0]:
        cfgs[key.replace('_clip_', '_clip_quickgelu_')] = cfg
  return architectures, cfgs


def _json(value):
  if isinstance(value, tuple) and len(value) == 2 and value[0] in ('norm_eps', 'unsupported'):
    return {value[0]: value[1]}
  return list(value) if isinstance(value, tuple) else value


def build(models_dir: pathlib.Path) -> dict:
  result = {}
  for module in ('vision_transformer.py', 'deit.py'):
    architectures, cfgs = _read_module(models_dir / module)
    for name, entry in architectures.items():
      # timm.models._registry.generate_default_cfgs: the default tag is the first of this order
      order, tags, starred, pretrained = collections.deque(), {}, False, False
      for key, cfg in cfgs.items():
        base, _, tag = key.partition('.')
        if base != name:
          continue
        has_weights = any(cfg.get(field) for field in _WEIGHTS_FIELDS)
        priority = (has_weights and not tag) or (tag.endswith('*') and not starred)
        tag = tag.strip('*')
        if priority:
          order.appendleft(tag)
          starred = True
        elif has_weights and not pretrained:
          order.appendleft(tag)
        else:
          order.append(tag)
        pretrained = pretrained or has_weights
        tags[tag] = {field: _json(cfg[field]) for field in _CFG_FIELDS if field in cfg}
      result[name] = dict(
        model_args={key: _json(value) for key, value in entry['model_args'].items()},
        distilled=entry['distilled'],
        default_tag=order[0] if order else '',
        tags=tags,
      )
  return dict(sorted(result.items()))


if __name__ == '__main__':
  TABLE.write_text(json.dumps(build(pathlib.Path(sys.argv[1])), indent=1, sort_keys=False) + '\n')
  print(f'wrote {TABLE} ({len(table())} architectures)')
