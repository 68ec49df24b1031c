"""The explorer's views without the page (``explore.views``): clicks map to the patch drawn under them,
and a sentence's hypotheses, scores and attention are the predictor's and the model's own (the RNN's
single attention included). Needs no browser and no Gradio."""

import numpy as np
import pytest
from flax import nnx

from explore import views
from seq2seq.tokenizer import BOS_ID
from tests.translation_test_configs import tiny_rnn_config
from trainer.predictor import Predictor
from trainer.task import load_task


@pytest.mark.parametrize('shape, grid', [((8, 8), (2, 2)), ((6, 8), (3, 4)), ((224, 224), (14, 14))])
def test_a_click_on_a_patch_of_the_shown_input_names_that_patch(shape, grid):
  model_input = np.random.default_rng(0).normal(size=(1, *shape, 1)).astype(np.float32)
  for query in range(grid[0] * grid[1]):
    shown, scale = views.shown_image(model_input, grid, query)
    outlined = np.argwhere(np.all(shown == (0, 200, 255), axis=-1))
    (top, left), (bottom, right) = outlined.min(0), outlined.max(0)
    assert (bottom - top + 1, right - left + 1) == (shape[0] // grid[0] * scale, shape[1] // grid[1] * scale)
    for y, x in [(top, left), (bottom, right), ((top + bottom) // 2, (left + right) // 2)]:
      assert views.patch_at(x, y, shape, grid, scale) == query


@pytest.mark.slow  # compiles an RNN's decoding and forward
def test_an_rnn_sentence_view_is_its_predictors_translation_with_its_single_attention(tmp_path):
  task = load_task(tiny_rnn_config())
  task.prepare(tmp_path)
  predictor = Predictor(tmp_path, task, task.make_model(nnx.Rngs(params=0)), 0, None)
  view = views.sentence_view(predictor, 'jump twice', beam_size=3)
  greedy, beam = view['hypotheses']
  assert greedy['translation'] == predictor(['jump twice'], beam_size=1)[0]['translation']
  assert beam['translation'] == predictor(['jump twice'], beam_size=3)[0]['translation']
  for hypothesis in view['hypotheses']:
    output = hypothesis['output_ids']
    source = np.asarray([view['source_ids']], np.int32)
    logits, intermediates = predictor.model(
      source, np.asarray([[BOS_ID, *output[:-1]]], np.int32), return_weights=True
    )
    [cross] = intermediates['cross_attention_weights']  # one layer of one head
    assert len(hypothesis['cross']) == 1 and hypothesis['cross'][0].shape == (
      1,
      len(output),
      len(view['source_ids']),
    )
    np.testing.assert_allclose(hypothesis['cross'][0], np.asarray(cross[0]), atol=1e-5)
    log_probabilities = np.asarray(logits[0], np.float64)
    log_probabilities = log_probabilities - np.log(np.exp(log_probabilities).sum(-1, keepdims=True))
    expected = sum(log_probabilities[t, token] for t, token in enumerate(output))
    np.testing.assert_allclose(hypothesis['log_probability'], expected, rtol=1e-4, atol=1e-4)
    assert hypothesis['encoder'] == []  # the RNN has no self-attention
  with pytest.raises(views.InputError, match='at most'):
    views.sentence_view(predictor, 'jump ' * 100, beam_size=3)
  with pytest.raises(views.InputError, match='empty'):
    views.sentence_view(predictor, '  ', beam_size=3)
  assert views.sentence_view(predictor, 'jump blorf', beam_size=2)['unknown'] == ['blorf']


@pytest.mark.slow  # compiles a tiny Transformer's searches and forward for two source widths
def test_sentences_of_a_compiled_width_compile_nothing_more(tmp_path):
  from tests.compilations import counted_compilations  # pylint: disable=g-import-not-at-top
  from tests.translation_test_configs import tiny_translation_config  # pylint: disable=g-import-not-at-top

  config = tiny_translation_config()
  config.data.update(max_source_length=16, max_target_length=16)
  task = load_task(config)
  task.prepare(tmp_path)
  predictor = Predictor(tmp_path, task, task.make_model(nnx.Rngs(params=0)), 0, None)
  widths = views.sentence_widths(predictor)
  assert widths == [8, 16]
  for width in widths:
    views.compile_sentence(predictor, width, beam_size=2)
  with counted_compilations() as compiles:
    for sentence in ['jump', 'walk left twice', 'jump twice and walk left thrice after look']:
      views.sentence_view(predictor, sentence, beam_size=2)
  assert compiles == []


def test_a_figure_in_pixels_keeps_what_a_tight_saved_picture_keeps():
  import io  # pylint: disable=g-import-not-at-top

  from PIL import Image  # pylint: disable=g-import-not-at-top

  from attention import drawing  # pylint: disable=g-import-not-at-top

  weights = [np.random.default_rng(0).dirichlet(np.ones(5), size=3) for _ in range(2)]
  figure = drawing.token_attention_figure(
    weights, list('abcde'), list('xyz'), 'a title', xlabel='source', ylabel='target'
  )
  buffer = io.BytesIO()
  figure.savefig(buffer, format='png', dpi=drawing.PIXELS_DPI, bbox_inches='tight')
  saved = np.asarray(Image.open(buffer).convert('RGB'))
  shown = drawing.pixels(figure)
  assert shown.dtype == np.uint8 and shown.shape[2] == 3
  assert np.all(np.abs(np.subtract(shown.shape[:2], saved.shape[:2])) <= 12), (shown.shape, saved.shape)
  # Nothing drawn is cut: the picture's edges are the figure's white background.
  for edge in (shown[0], shown[-1], shown[:, 0], shown[:, -1]):
    assert np.all(edge == 255)
  untrimmed = drawing.pixels(figure, tight=False)
  assert untrimmed.shape[:2] == tuple(
    round(side * drawing.PIXELS_DPI) for side in figure.get_size_inches()[::-1]
  )
