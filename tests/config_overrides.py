"""Dotted-path overrides for the tiny test configs: ``override(config, {'model.width': 8})``."""


def override(config, overrides):
  """Sets each ``'a.b.c'`` field of ``config``; a path that is not in the config is a KeyError."""
  for path, value in overrides.items():
    *parents, name = path.split('.')
    section = config
    for part in parents:
      section = section[part]
    if name not in section:
      raise KeyError(f'{path} is not a field of the config')
    section[name] = value
  return config
