"""The explorer's page (Gradio Blocks): one column per run, side by side, over one shared input.

Images: upload a file or click a point of the test set; click a patch to see its attention. Sentences:
type one; hover a word of a translation to light the source words it attends to. Clips: upload a
``.npy`` or pick a test clip. Each run has a checkpoint slider (a workdir's kept checkpoints) and its
training curves; a sweep adds its table. Every error is a message in the run's column; the server
keeps serving. Files are only read from the paths given on the command line and from uploads.
"""

import html
import json

import gradio as gr
import numpy as np

from ablation import plots
from attention import drawing
from explore import views
from trainer.errors import UserError

TITLE = 'Attention explorer'
CSS = """
.tokens span { padding: 2px 4px; margin: 1px; border-radius: 3px; display: inline-block; }
.tokens .tgt { cursor: pointer; border: 1px solid #bbb; }
.tokens .tgt:hover { outline: 2px solid #0080ff; }
.hypotheses td, .hypotheses th { padding: 2px 8px; text-align: left; }
"""


class Column:
  """One run's part of the page: what it shows and how it answers."""

  def __init__(self, index: int, run):
    self.index, self.run = index, run
    self.slider_steps = len(run.steps())
    self._similarity = {}  # step -> pixels of the position-similarity figure

  def step_of(self, position) -> int | None:
    """The step at slider ``position``; the latest where the page has no slider for the run (it kept one
    checkpoint or none when the page was built)."""
    steps = self.run.steps()
    if not steps:
      return None
    if position is None or self.slider_steps <= 1:
      return steps[-1]
    return steps[min(int(position), len(steps) - 1)]

  def title(self, step) -> str:
    return self.run.name if self.run.weights else f'{self.run.name}, step {step}'

  def similarity(self, predictor, step):
    if step not in self._similarity:
      figure = views.position_similarity(predictor.model, self.title(step))
      self._similarity[step] = None if figure is None else drawing.pixels(figure)
    return self._similarity[step]


def _message(error: Exception) -> str:
  return f'**Error:** {html.escape(" ".join(str(error).split()))}'


def _rounded(array) -> list:
  return np.round(np.asarray(array, np.float64), 6).tolist()


def _label(classes: list[dict]) -> dict:
  return {entry['name']: entry['probability'] for entry in classes}


# Images ----------------------------------------------------------------------------------------------


def _image_example(column: Column, predictor, source: dict):
  if source.get('kind') == 'file':
    return views.read_example(predictor, source['path'], source.get('name', ''))
  return views.Example(
    np.asarray(source['model_input'], np.float32), source.get('label'), source.get('name', '')
  )


def image_outputs(column: Column, source: dict | None, query: int | None, position):
  """(classes, shown input, attention picture, similarity picture, numbers, message, step text)."""
  step = column.step_of(position)
  try:
    if step is None and not column.run.weights:
      raise UserError(column.run.problem())
    predictor = column.run.predictor(step)
    step_text = f'step {predictor.step}' if not column.run.weights else 'weights'
    similarity = column.similarity(predictor, step)
    if source is None:
      return (
        gr.skip(),
        gr.skip(),
        gr.skip(),
        similarity,
        gr.skip(),
        'Upload an image or pick one from the test set.',
        step_text,
      )
    example = _image_example(column, predictor, source)
    view = views.image_view(predictor, example, query)
    shown, _ = views.shown_image(example.model_input, view['grid'], query)
    figure = views.image_attention_figure(view, example, column.title(predictor.step))
    numbers = {
      'run': column.run.name,
      'step': predictor.step,
      'input': example.name,
      'classes': view['classes'],
      'grid': list(view['grid']),
      'query': query,
      'attention': [_rounded(layer) for layer in view['reader']],
      'rollout': _rounded(view['rollout']),
    }
    label = example.label
    note = '' if label is None else f'label: {label}'
    return (
      _label(view['classes']),
      shown,
      drawing.pixels(figure),
      similarity,
      json.dumps(numbers),
      note,
      step_text,
    )
  except UserError as error:
    return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), _message(error), gr.skip()


def _image_page(columns: list[Column]):
  source = gr.State(None)
  query = gr.State(None)
  with gr.Row():
    upload = gr.File(label='Image (PNG or JPEG)', type='filepath', elem_id='image-upload')
    gr.Markdown(
      'Click a patch of an input below to see where it attends; click it again for the class token.'
    )

  def body(column: Column) -> list:
    classes = gr.Label(num_top_classes=5, label='prediction', elem_id=f'classes-{column.index}')
    shown = gr.Image(
      label='input as the model saw it (click a patch)', interactive=False, elem_id=f'input-{column.index}'
    )
    attention = gr.Image(label='attention', interactive=False, elem_id=f'attention-{column.index}')
    similarity = gr.Image(
      label='position embedding similarity', interactive=False, elem_id=f'similarity-{column.index}'
    )
    return [classes, shown, attention, similarity, _numbers_box(column)]

  per_run, sliders, all_outputs = _run_columns(columns, body)

  def everything(source_value, query_value, *positions):
    outputs = []
    for (column, _, _), position in zip(per_run, positions):
      outputs += image_outputs(column, source_value, query_value, position)
    return outputs

  def uploaded(path):
    if path is None:
      return gr.skip(), gr.skip(), gr.skip()
    # The upload box is emptied, ready for the next file; the columns show the one read.
    return {'kind': 'file', 'path': path, 'name': path.rsplit('/', 1)[-1]}, None, None

  # 'minimal': a timer, not an overlay redrawn on every output, which slows the browser more than a
  # fast answer takes.
  upload.upload(uploaded, upload, [source, query, upload]).then(
    everything, [source, query, *sliders], all_outputs, show_progress='minimal'
  )
  for column, slider, outputs in per_run:
    slider.change(
      lambda source_value, query_value, position, column=column: image_outputs(
        column, source_value, query_value, position
      ),
      [source, query, slider],
      outputs,
      show_progress='hidden',
    )
    shown = outputs[1]

    def clicked(source_value, query_value, position, event: gr.SelectData, column=column):
      if source_value is None:
        return gr.skip()
      predictor = column.run.predictor(column.step_of(position))
      example = _image_example(column, predictor, source_value)
      grid = tuple(int(side) for side in predictor.model.grid)
      _, scale = views.shown_image(example.model_input, grid, None)
      patch = views.patch_at(*event.index, example.model_input.shape[1:3], grid, scale)
      return None if patch == query_value else patch

    shown.select(clicked, [source, query, slider], query).then(
      everything, [source, query, *sliders], all_outputs, show_progress='hidden'
    )
  return source, query, per_run, sliders, all_outputs, everything


# Sentences -------------------------------------------------------------------------------------------


def hypotheses_html(view: dict) -> str:
  rows = []
  for hypothesis in view['hypotheses']:
    score = '' if hypothesis['score'] is None else f'{hypothesis["score"]:.3f}'
    rows.append(
      f'<tr><td>{html.escape(hypothesis["search"])}</td>'
      f'<td class="translation">{html.escape(hypothesis["translation"])}</td>'
      f'<td>{hypothesis["log_probability"]:.3f}</td><td>{score}</td></tr>'
    )
  return (
    '<table class="hypotheses"><tr><th>search</th><th>translation</th><th>log-probability</th>'
    f'<th>beam score (length-penalised)</th></tr>{"".join(rows)}</table>'
  )


def _numbers(row) -> str:
  return ' '.join(f'{float(w):.6f}' for w in row)


def alignment_html(view: dict, key: str) -> str:
  """The last hypothesis's source and target tokens; hovering a target token lights each source token
  by its cross-attention weight (last layer, heads averaged, scaled to the row's largest)."""
  hypothesis = view['hypotheses'][-1]
  weights = np.asarray(hypothesis['cross'][-1]).mean(axis=0)  # [target, source]
  rules = []
  for i, row in enumerate(weights):
    top = max(float(row.max()), 1e-12)
    rules += [
      f'#{key}:has(.tgt[data-i="{i}"]:hover) .src[data-j="{j}"] {{ background: rgba(255, 120, 0, {w / top:.3f}); }}'
      for j, w in enumerate(row)
    ]
  source = ''.join(
    f'<span class="src" data-j="{j}">{html.escape(label)}</span>'
    for j, label in enumerate(view['source_labels'])
  )
  target = ''.join(
    f'<span class="tgt" data-i="{i}" data-weights="{_numbers(weights[i])}">{html.escape(label)}</span>'
    for i, label in enumerate(hypothesis['target_labels'])
  )
  return (
    f'<div id="{key}" class="tokens"><style>{" ".join(rules)}</style>'
    f'<p><b>{html.escape(hypothesis["search"])}</b> (hover a word):</p><p>{target}</p>'
    f'<p><b>source</b>:</p><p>{source}</p></div>'
  )


HEADS = ('averaged', 'each head')


def sentence_outputs(column: Column, text: str, beam_size, position, heads: str = HEADS[0]):
  """(hypotheses, alignment, cross-attention picture, encoder picture, numbers, message, step text); the
  pictures have one panel per layer with its heads averaged, or with ``heads='each head'`` one per layer
  and head."""
  from seq2seq import pictures  # pylint: disable=g-import-not-at-top

  step = column.step_of(position)
  skip = (gr.skip(),) * 5
  try:
    if step is None:
      raise UserError(column.run.problem())
    predictor = column.run.predictor(step)
    step_text = f'step {predictor.step}'
    if not text:
      return (*skip, 'Type a sentence to translate.', step_text)
    view = views.sentence_view(predictor, text, int(beam_size))
    best = view['hypotheses'][-1]
    title = f'{column.title(predictor.step)}: {best["search"]}'
    per_head = heads == HEADS[1]
    cross = pictures.sentence_attention_figure(
      best['cross'], view['source_labels'], best['target_labels'], title, per_head=per_head
    )
    encoder = (
      drawing.pixels(
        pictures.sentence_attention_figure(
          best['encoder'],
          view['source_labels'],
          view['source_labels'],
          f'{column.title(predictor.step)}: encoder self-attention',
          per_head=per_head,
          ylabel='source (query)',
        )
      )
      if best['encoder']
      else None
    )
    numbers = {
      'run': column.run.name,
      'step': predictor.step,
      'source': view['source_labels'],
      'hypotheses': [
        {
          'search': h['search'],
          'translation': h['translation'],
          'log_probability': h['log_probability'],
          'score': h['score'],
          'target': h['target_labels'],
          'cross_attention': [_rounded(layer) for layer in h['cross']],
        }
        for h in view['hypotheses']
      ],
    }
    note = ''
    if view['unknown']:
      note = f'Words outside the vocabulary, read as unknown: {html.escape(", ".join(view["unknown"]))}'
    key = f'alignment-{column.index}'
    return (
      hypotheses_html(view),
      alignment_html(view, key),
      drawing.pixels(cross),
      encoder,
      json.dumps(numbers),
      note,
      step_text,
    )
  except UserError as error:
    return (*skip, _message(error), gr.skip())


def _sentence_page(columns: list[Column], beam_size: int):
  with gr.Row():
    text = gr.Textbox(label='Sentence', elem_id='sentence', scale=4)
    beam = gr.Slider(2, 8, value=beam_size, step=1, label='beam size', elem_id='beam-size')
    heads = gr.Radio(list(HEADS), value=HEADS[0], label='attention heads', elem_id='attention-heads')
    go = gr.Button('Translate', elem_id='translate')

  def body(column: Column) -> list:
    hypotheses = gr.HTML(elem_id=f'hypotheses-{column.index}')
    alignment = gr.HTML(elem_id=f'alignment-html-{column.index}')
    cross = gr.Image(label='cross-attention per layer', interactive=False, elem_id=f'cross-{column.index}')
    encoder = gr.Image(label='encoder self-attention per layer', interactive=False)
    return [hypotheses, alignment, cross, encoder, _numbers_box(column)]

  per_run, sliders, all_outputs = _run_columns(columns, body)

  def everything(text_value, beam_value, heads_value, *positions):
    outputs = []
    for (column, _, _), position in zip(per_run, positions):
      outputs += sentence_outputs(column, text_value, beam_value, position, heads_value)
    return outputs

  for trigger in (go.click, text.submit, heads.change):  # a timer, as for uploads
    trigger(everything, [text, beam, heads, *sliders], all_outputs, show_progress='minimal')
  for column, slider, outputs in per_run:
    slider.change(
      lambda t, b, h, p, column=column: sentence_outputs(column, t, b, p, h),
      [text, beam, heads, slider],
      outputs,
      show_progress='hidden',
    )
  return [text, beam, heads, *sliders], all_outputs, everything


# Clips -----------------------------------------------------------------------------------------------


def clip_outputs(column: Column, source: dict | None, position):
  step = column.step_of(position)
  try:
    if step is None:
      raise UserError(column.run.problem())
    predictor = column.run.predictor(step)
    step_text = f'step {predictor.step}'
    if source is None:
      return gr.skip(), gr.skip(), 'Upload a .npy clip or pick a test clip.', step_text
    if source['kind'] == 'file':
      example = views.read_example(
        predictor,
        np.load(source['path'], allow_pickle=False) if source['path'].endswith('.npy') else source['path'],
      )
    else:
      example = views.Example(np.asarray(source['model_input'], np.float32), source.get('label'))
    classes, figure = views.clip_view(predictor, example, column.title(predictor.step))
    note = '' if example.label is None else f'label: {example.label}'
    return _label(classes), drawing.pixels(figure), note, step_text
  except (UserError, ValueError) as error:
    return gr.skip(), gr.skip(), _message(error), gr.skip()


def _clip_page(columns: list[Column]):
  source = gr.State(None)
  upload = gr.File(
    label='Clip (.npy [frames, height, width, channels])', type='filepath', elem_id='clip-upload'
  )

  def body(column: Column) -> list:
    classes = gr.Label(num_top_classes=5, label='prediction', elem_id=f'classes-{column.index}')
    picture = gr.Image(
      label='frames; spatial attention per frame; temporal attention; rollout', interactive=False
    )
    return [classes, picture]

  per_run, sliders, all_outputs = _run_columns(columns, body)

  def everything(source_value, *positions):
    outputs = []
    for (column, _, _), position in zip(per_run, positions):
      outputs += clip_outputs(column, source_value, position)
    return outputs

  upload.upload(
    lambda path: (gr.skip(), gr.skip()) if path is None else ({'kind': 'file', 'path': path}, None),
    upload,
    [source, upload],
  ).then(everything, [source, *sliders], all_outputs)
  for column, slider, outputs in per_run:
    slider.change(lambda s, p, column=column: clip_outputs(column, s, p), [source, slider], outputs)
  return source, sliders, all_outputs, everything


# Shared parts ----------------------------------------------------------------------------------------


def _run_columns(columns: list[Column], body) -> tuple[list, list, list]:
  """One column a run, side by side: its head (``_column_head``), then the outputs ``body(column)``
  builds. Returns ``(per_run, sliders, all_outputs)``: ``per_run`` holds ``(column, slider, outputs)``,
  a column's outputs being ``body``'s, then its message and step lines."""
  per_run = []
  with gr.Row():
    for column in columns:
      with gr.Column():
        slider, step_text, message = _column_head(column)
        per_run.append((column, slider, [*body(column), message, step_text]))
  return (
    per_run,
    [slider for _, slider, _ in per_run],
    [output for _, _, outputs in per_run for output in outputs],
  )


def _numbers_box(column: Column):
  """The numbers behind a column's pictures, folded away."""
  with gr.Accordion('numbers behind the pictures', open=False):
    return gr.Textbox(lines=6, max_lines=12, show_label=False, elem_id=f'numbers-{column.index}')


def _column_head(column: Column):
  """A run's column starts with its name, its checkpoint slider and the line for its messages."""
  gr.Markdown(f'### {html.escape(column.run.name)}')
  slider, step_text = _checkpoint_slider(column)
  return slider, step_text, gr.Markdown(elem_id=f'message-{column.index}')


def _checkpoint_slider(column: Column):
  steps = column.run.steps()
  visible = len(steps) > 1
  slider = gr.Slider(
    0,
    max(len(steps) - 1, 1),
    value=max(len(steps) - 1, 0),
    step=1,
    label='checkpoint (oldest to latest kept)',
    visible=visible,
    elem_id=f'checkpoint-{column.index}',
  )
  step_text = gr.Markdown(elem_id=f'step-{column.index}')
  return slider, step_text


def _glance_section(columns: list[Column], source, sliders, all_outputs, everything, extra_inputs):
  """The test set's pooled features in two dimensions per run; clicking a point opens that example."""
  with gr.Accordion('The test set at a glance (pooled features, PCA)', open=False):
    with gr.Row():
      for column, slider in zip(columns, sliders):
        if column.run.weights:
          continue
        with gr.Column():
          button = gr.Button(
            f'Embed the test set of {column.run.name}', elem_id=f'glance-button-{column.index}'
          )
          message = gr.Markdown(elem_id=f'glance-message-{column.index}')
          picture = gr.Image(
            label='click a point to open it above', interactive=False, elem_id=f'glance-{column.index}'
          )
          held = gr.State(None)

          def embed(position, column=column):
            try:
              predictor = column.run.predictor(column.step_of(position))
              inputs, labels = views.test_examples(predictor)
              view = views.glance(predictor, inputs, labels)
              figure, where = views.glance_figure(view, column.title(predictor.step))
              held_value = {
                'inputs': inputs,
                'labels': labels,
                'where': where,
                'predicted': view['predicted'],
              }
              return drawing.pixels(figure, tight=False), held_value, ''
            except UserError as error:
              return gr.skip(), gr.skip(), _message(error)

          button.click(embed, [slider], [picture, held, message])

          def pick(held_value, event: gr.SelectData):
            if held_value is None:
              return gr.skip(), gr.skip()
            distances = np.hypot(*(np.asarray(held_value['where']) - np.asarray(event.index, float)).T)
            index = int(np.argmin(distances))
            example = {
              'kind': 'example',
              'model_input': held_value['inputs'][index : index + 1],
              'label': int(held_value['labels'][index]),
              'name': f'test example {index}',
            }
            return example, None

          def pick_example(held_value, event: gr.SelectData):
            return pick(held_value, event)[0]

          if extra_inputs is None:  # clips: the example alone
            picture.select(pick_example, held, source).then(everything, [source, *sliders], all_outputs)
          else:  # images: the example, and the query back to the class token
            picture.select(pick, held, [source, extra_inputs]).then(
              everything, [source, extra_inputs, *sliders], all_outputs
            )


def _curves_section(runs, sweep):
  with gr.Accordion('Training and evaluation curves (metrics.jsonl)', open=False):
    button = gr.Button('Draw the curves', elem_id='curves-button')
    picture = gr.Image(interactive=False, elem_id='curves')
    message = gr.Markdown()

    def draw():
      try:
        if sweep is not None:
          summary = sweep.summary
          figure = plots.training_curves_figure(
            [(arm.path, arm.name) for arm in runs],
            summary['best_metric'],
            summary.get('logged_metric'),
            summary['eval_split'],
            plots._is_percent(summary['task'], summary['best_metric']),  # pylint: disable=protected-access
          )
        elif len(runs) == 1:
          figure = plots.run_curves_figure(runs[0].path, runs[0].name)
        else:
          figure = plots.training_curves_figure([(r.path, r.name) for r in runs], *_curve_args(runs[0]))
        return drawing.pixels(figure), ''
      except (UserError, OSError, KeyError) as error:
        return gr.skip(), _message(error)

    button.click(draw, None, [picture, message])


def _curve_args(run):
  from ablation.sweep import sweep_split  # pylint: disable=g-import-not-at-top
  from trainer.io import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from trainer.observe import observe_config  # pylint: disable=g-import-not-at-top

  config = workdir_lib.load_config(run.path)
  percent = plots._is_percent(config.task, config.best_metric)  # pylint: disable=protected-access
  return config.best_metric, observe_config.checkpoint_metric(config), sweep_split(config), percent


def build(runs, kind: str, *, sweep=None, beam_size: int = 4) -> gr.Blocks:
  """The page for ``runs`` (all of one ``kind``: 'image', 'sentence' or 'clip'), and ``sweep``'s table."""
  columns = [Column(index, run) for index, run in enumerate(runs)]
  with gr.Blocks(title=TITLE, analytics_enabled=False) as page:
    gr.Markdown(f'# {TITLE}')
    if sweep is not None:
      with gr.Accordion(f'Sweep {sweep.path.name}: the table ablate.py prints', open=True):
        gr.Markdown(sweep.table, elem_id='sweep-table')
    if kind == 'image':
      source, query, _, sliders, all_outputs, everything = _image_page(columns)
      _glance_section(columns, source, sliders, all_outputs, everything, query)
      inputs = [source, query, *sliders]
    elif kind == 'sentence':
      inputs, all_outputs, everything = _sentence_page(columns, beam_size)
    else:
      source, sliders, all_outputs, everything = _clip_page(columns)
      _glance_section(columns, source, sliders, all_outputs, everything, None)
      inputs = [source, *sliders]
    # Once the page is shown, each column shows the step it answers for (its checkpoint restored).
    page.load(everything, inputs, all_outputs, show_progress='hidden')
    if any(not run.weights for run in runs):
      _curves_section([run for run in runs if not run.weights], sweep)
    numbers = json.dumps([{'run': run.name, 'path': str(run.path), 'steps': run.steps()} for run in runs])
    gr.JSON(value=json.loads(numbers), label='runs and their kept checkpoints', elem_id='runs')
  return page
