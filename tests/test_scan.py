"""SCAN generation and splits, checked against the official files when they are present."""

from collections import Counter

import pytest

from seq2seq.scan import SCAN_SPLITS, generate_scan, read_scan_file, scan_split
from tests.real_data import data_set_dir

SCAN_DIR = data_set_dir('scan')
needs_official_scan = pytest.mark.skipif(not SCAN_DIR.is_dir(), reason=f'{SCAN_DIR} not present')

OFFICIAL_SPLIT_FILES = {
  'simple': 'simple_split/tasks_{part}_simple.txt',
  'length': 'length_split/tasks_{part}_length.txt',
  'addprim_jump': 'add_prim_split/tasks_{part}_addprim_jump.txt',
  'addprim_turn_left': 'add_prim_split/tasks_{part}_addprim_turn_left.txt',
}


@pytest.fixture(scope='module')
def examples():
  return generate_scan()


@pytest.fixture(scope='module')
def splits():
  return {split: scan_split(split) for split in SCAN_SPLITS}


def test_generate_scan_counts_and_known_interpretations(examples):
  assert len(examples) == 20910
  meanings = dict(examples)
  assert len(meanings) == 20910
  assert meanings['jump'] == 'I_JUMP'
  assert meanings['turn left'] == 'I_TURN_LEFT'
  assert meanings['jump left'] == 'I_TURN_LEFT I_JUMP'
  assert meanings['run opposite right'] == 'I_TURN_RIGHT I_TURN_RIGHT I_RUN'
  assert meanings['turn around right'] == ' '.join(['I_TURN_RIGHT'] * 4)
  assert meanings['look around left'] == ' '.join(['I_TURN_LEFT I_LOOK'] * 4)
  assert meanings['walk twice and look thrice'] == ' '.join(['I_WALK'] * 2 + ['I_LOOK'] * 3)
  assert meanings['jump after turn opposite left'] == 'I_TURN_LEFT I_TURN_LEFT I_JUMP'
  assert 'turn' not in meanings
  assert max(len(actions.split()) for actions in meanings.values()) == 48
  assert examples == generate_scan()


@needs_official_scan
def test_generate_scan_equals_official_tasks(examples):
  assert set(examples) == set(read_scan_file(SCAN_DIR / 'tasks.txt'))


@needs_official_scan
@pytest.mark.parametrize('split', ['length', 'addprim_jump', 'addprim_turn_left'])
def test_deterministic_splits_equal_official_files(splits, split):
  for part in ('train', 'test'):
    official = read_scan_file(SCAN_DIR / OFFICIAL_SPLIT_FILES[split].format(part=part))
    ours = splits[split][part]
    assert len(ours) == len(official)
    assert Counter(ours) == Counter(official)


def test_split_sizes(splits):
  expected = {
    'simple': (16728, 4182),
    'length': (16990, 3920),
    'addprim_jump': (14670, 7706),
    'addprim_turn_left': (21890, 1208),
  }
  for split, (num_train, num_test) in expected.items():
    assert (len(splits[split]['train']), len(splits[split]['test'])) == (num_train, num_test)


def test_simple_split_is_a_seeded_partition(examples, splits):
  train, test = splits['simple']['train'], splits['simple']['test']
  assert not set(train) & set(test)
  assert set(train) | set(test) == set(examples)
  assert scan_split('simple', seed=0) == splits['simple']
  assert set(scan_split('simple', seed=1)['test']) != set(test)


def test_length_split_separates_by_action_count(splits):
  assert max(len(actions.split()) for _, actions in splits['length']['train']) == 22
  assert min(len(actions.split()) for _, actions in splits['length']['test']) == 24


@pytest.mark.parametrize('split, primitive', [('addprim_jump', 'jump'), ('addprim_turn_left', 'turn left')])
def test_addprim_train_holds_the_primitive_alone_as_a_tenth(splits, split, primitive):
  train, test = splits[split]['train'], splits[split]['test']
  commands = Counter(command for command, _ in train)
  primitive_copies = commands.pop(primitive)
  assert primitive_copies * 10 == len(train)
  assert not any(f' {primitive} ' in f' {command} ' for command in commands)
  assert all(f' {primitive} ' in f' {command} ' and command != primitive for command, _ in test)


def test_non_simple_split_contents_do_not_depend_on_seed(splits):
  other_seed = scan_split('length', seed=3)
  assert Counter(other_seed['train']) == Counter(splits['length']['train'])


def test_unknown_split_names_the_allowed_ones():
  with pytest.raises(ValueError, match='addprim_turn_left') as error:
    scan_split('around_right')
  assert 'around_right' in str(error.value)


def test_read_scan_file_round_trip(tmp_path, examples):
  path = tmp_path / 'tasks.txt'
  path.write_text(''.join(f'IN: {command} OUT: {actions}\n' for command, actions in examples[:100]))
  assert read_scan_file(path) == examples[:100]


@pytest.mark.parametrize('bad_line', ['IN: jump I_JUMP', 'jump OUT: I_JUMP', 'IN: jump OUT: ', ''])
def test_read_scan_file_names_file_and_line_of_a_malformed_line(tmp_path, bad_line):
  path = tmp_path / 'broken.txt'
  path.write_text(f'IN: walk OUT: I_WALK\nIN: run OUT: I_RUN\n{bad_line}\nIN: look OUT: I_LOOK\n')
  with pytest.raises(ValueError, match='broken.txt:3'):
    read_scan_file(path)
