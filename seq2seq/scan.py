"""SCAN (Lake & Baroni 2018): every command of the grammar, its actions, and the splits.

The grammar, as published:

    C -> S and S | S after S | S
    S -> V twice | V thrice | V
    V -> D opposite left|right | D around left|right | D | U
    D -> U left | U right | turn left | turn right
    U -> walk | look | run | jump

where the D before 'opposite'/'around' is a bare 'turn' or U. It yields 20,910 commands.
The 'length' and add-primitive splits reproduce the official files of brendenlake/SCAN
as multisets (only the order of examples differs: ours is a seeded shuffle); 'simple' is
a seeded random 80/20 split of the same sizes as the official one.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from trainer.errors import ConfigError, DataError

SCAN_SPLITS = ('simple', 'length', 'addprim_jump', 'addprim_turn_left')

PRIMITIVE_ACTIONS = {'walk': 'I_WALK', 'look': 'I_LOOK', 'run': 'I_RUN', 'jump': 'I_JUMP'}
TURN_ACTIONS = {'left': 'I_TURN_LEFT', 'right': 'I_TURN_RIGHT'}
DIRECTIONS = ('left', 'right')
REPETITIONS = {'twice': 2, 'thrice': 3}

SIMPLE_TRAIN_FRACTION = 0.8
LENGTH_SPLIT_MAX_TRAIN_ACTIONS = 22
# In the official add-primitive training files the bare primitive command is repeated
# so that it makes up exactly this fraction of the training examples.
ADDPRIM_PRIMITIVE_FRACTION = 0.1
ADDPRIM_PRIMITIVES = {'addprim_jump': 'jump', 'addprim_turn_left': 'turn left'}


def _verb_phrases() -> list[tuple[str, list[str]]]:
  """Every V of the grammar with its action list."""
  phrases = []
  for verb, action in PRIMITIVE_ACTIONS.items():
    phrases.append((verb, [action]))
  for verb in (*PRIMITIVE_ACTIONS, 'turn'):
    verb_actions = [] if verb == 'turn' else [PRIMITIVE_ACTIONS[verb]]
    for direction in DIRECTIONS:
      turn = TURN_ACTIONS[direction]
      phrases.append((f'{verb} {direction}', [turn] + verb_actions))
      phrases.append((f'{verb} opposite {direction}', [turn, turn] + verb_actions))
      phrases.append((f'{verb} around {direction}', ([turn] + verb_actions) * 4))
  return phrases


def _sentences() -> list[tuple[str, list[str]]]:
  """Every S of the grammar: a V, optionally repeated twice or thrice."""
  sentences = []
  for phrase, actions in _verb_phrases():
    sentences.append((phrase, actions))
    for word, count in REPETITIONS.items():
      sentences.append((f'{phrase} {word}', actions * count))
  return sentences


def generate_scan() -> list[tuple[str, str]]:
  """All 20,910 SCAN commands with their action sequences, in a fixed order."""
  sentences = _sentences()
  examples = list(sentences)
  for (first, first_actions), (second, second_actions) in itertools.product(sentences, repeat=2):
    examples.append((f'{first} and {second}', first_actions + second_actions))
    examples.append((f'{first} after {second}', second_actions + first_actions))
  return [(command, ' '.join(actions)) for command, actions in examples]


def _has_primitive(command: str, primitive: str) -> bool:
  return f' {primitive} ' in f' {command} '


def _addprim_train_test(examples, primitive: str):
  primitive_example = next(e for e in examples if e[0] == primitive)
  test = [e for e in examples if _has_primitive(e[0], primitive) and e[0] != primitive]
  train = [e for e in examples if not _has_primitive(e[0], primitive)]
  copies = round(len(train) * ADDPRIM_PRIMITIVE_FRACTION / (1 - ADDPRIM_PRIMITIVE_FRACTION))
  return train + [primitive_example] * copies, test


def scan_split(split: str, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
  """{'train': [...], 'test': [...]} for one of SCAN_SPLITS, each list shuffled with `seed`.

  'simple' is a random 80/20 split drawn with `seed`; the other splits have the same
  contents for every seed.
  """
  if split not in SCAN_SPLITS:
    raise ConfigError(f'unknown SCAN split {split!r}; expected one of {", ".join(SCAN_SPLITS)}')
  examples = generate_scan()
  rng = random.Random(seed)
  if split == 'simple':
    rng.shuffle(examples)
    num_train = round(len(examples) * SIMPLE_TRAIN_FRACTION)
    return {'train': examples[:num_train], 'test': examples[num_train:]}
  if split == 'length':
    is_short = [len(actions.split()) <= LENGTH_SPLIT_MAX_TRAIN_ACTIONS for _, actions in examples]
    train = [e for e, short in zip(examples, is_short) if short]
    test = [e for e, short in zip(examples, is_short) if not short]
  else:
    train, test = _addprim_train_test(examples, ADDPRIM_PRIMITIVES[split])
  rng.shuffle(train)
  rng.shuffle(test)
  return {'train': train, 'test': test}


def read_scan_file(path) -> list[tuple[str, str]]:
  """Read an official SCAN file: one `IN: <command> OUT: <actions>` a line."""
  path = Path(path)
  examples = []
  for line_number, line in enumerate(path.read_bytes().splitlines(), start=1):
    try:
      text = line.decode('utf-8')
    except UnicodeDecodeError as error:
      raise DataError(f'{path}:{line_number}: invalid UTF-8 ({error.reason} at byte {error.start})') from None
    command, separator, actions = text.removeprefix('IN: ').partition(' OUT: ')
    if not text.startswith('IN: ') or not separator or not command.strip() or not actions.strip():
      raise DataError(f'{path}:{line_number}: expected "IN: <command> OUT: <actions>", got {text[:80]!r}')
    examples.append((command.strip(), actions.strip()))
  return examples
