"""A model's options from its config section: the family's defaults with the section's values over them.

Each family keeps every default of its ``model`` section in one place, its ``default_model_config()``,
and builds its model in one function (``vit.model.make_vit``, ``video.model.make_video_model``,
``seq2seq.architectures.make_translator``) that fills the section here: a config written before a
field existed gets that field's default, and a misspelt field is an error instead of a line
silently ignored.
"""

import ml_collections


def with_defaults(section, defaults) -> ml_collections.ConfigDict:
  """A new section: ``defaults`` with ``section``'s values over them (both ``ConfigDict`` or ``dict``);
  ``ValueError`` naming every field of ``section`` that ``defaults`` lacks."""
  options = dict(defaults.items())
  unknown = [name for name in section.keys() if name not in options]
  if unknown:
    raise ValueError(
      f'unknown field{"s" if len(unknown) > 1 else ""} {", ".join(map(repr, unknown))}; '
      f'the fields are: {", ".join(options)}.'
    )
  options.update(section.items())
  return ml_collections.ConfigDict(options)
