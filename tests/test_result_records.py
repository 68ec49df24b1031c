"""Result records (records/store.py), their runner and rerunner, and the tables made from them."""

import importlib.metadata
import json
import pathlib
import re
import subprocess
import tempfile

import pytest

from records import record, reproduce, store, tables

PRINTS_NUMBERS = 'echo starting; echo \'{"accuracy": 0.75, "nested": {"loss": 0.5}, "split": "test"}\''


def test_numbers_are_the_last_json_line_flattened_and_without_strings():
  stdout = (
    'log line\n{"not": "last"}\n{"accuracy": 0.5, "b": {"c": [1, 2]}, "split": "test", "ok": true}\nbye\n'
  )
  assert store.numbers_from_stdout(stdout) == {'accuracy': 0.5, 'b.c.0': 1, 'b.c.1': 2, 'ok': True}
  with pytest.raises(store.RecordError, match='no JSON object'):
    store.numbers_from_stdout('no numbers here\n')


def test_an_ablations_runs_are_named_by_their_run_names():
  summary = {'seeds': 1, 'runs': [{'name': 'posemb=none', 'metrics': {'accuracy': 0.5, 'split': 'test'}}]}
  assert store.flatten(summary) == {'seeds': 1, 'runs.posemb=none.metrics.accuracy': 0.5}


def test_a_record_name_is_checked_before_anything_runs():
  with pytest.raises(store.RecordError, match='lowercase'):
    store.path_of('../outside')


def test_the_machine_names_cpu_cores_and_simd_flags():
  machine = store.machine()
  assert machine['cores'] >= 1 and machine['cpu']
  assert all(store.SIMD_FLAG.match(flag) for flag in machine['flags'])


def test_a_spread_is_metric_equals_number():
  assert record.parse_spread(['accuracy=0.0056'], 'seeds') == {'accuracy': {'value': 0.0056, 'why': 'seeds'}}
  with pytest.raises(SystemExit, match='METRIC=NUMBER'):
    record.parse_spread(['accuracy'], None)


def test_overrides_go_to_every_part_that_takes_a_config():
  command = 'python train.py --config c.py --workdir runs/w && python evaluate.py --workdir runs/w'
  assert reproduce.with_overrides(command, ['--config.total_steps=20']) == (
    'python train.py --config c.py --workdir runs/w --config.total_steps=20 && python evaluate.py --workdir runs/w'
  )
  with pytest.raises(store.RecordError, match='takes --config'):
    reproduce.with_overrides('python -m benchmarks.decode_speed', ['--config.seed=1'])


def test_a_number_is_within_its_spread_or_equal_at_the_stated_digits():
  spread = {'accuracy': {'value': 0.0056, 'why': 'seeds'}}
  assert reproduce.within('accuracy', 0.9917, 0.9861, spread)
  assert not reproduce.within('accuracy', 0.9917, 0.9833, spread)
  assert reproduce.within('loss', 0.1224, 0.12238, {})  # the record states four decimals
  assert not reproduce.within('loss', 0.1224, 0.1226, {})
  assert not reproduce.within('loss', 0.1224, None, {})
  lines, ok = reproduce.comparison(
    {'numbers': {'accuracy': 0.9917}, 'spread': spread}, {'accuracy': 0.97, 'x': 1}
  )
  assert not ok and 'OUTSIDE' in lines[1] and 'not in the record' in lines[2]
  median_only = {
    'numbers': {'images_per_second': 100.0, 'images_per_second.max': 120.0},
    'compared': ['images_per_second'],
  }
  lines, ok = reproduce.comparison(median_only, {'images_per_second': 100.0})
  assert ok and 'not compared' in lines[2]


def test_a_sweeps_timings_are_shown_but_not_compared():
  run = 'runs.posemb=none,seed=0'
  record = {'numbers': {f'{run}.metrics.accuracy': 0.9, f'{run}.cost.train_examples_per_second': 600.0}}
  lines, ok = reproduce.comparison(
    record, {f'{run}.metrics.accuracy': 0.9, f'{run}.cost.train_examples_per_second': 450.0}
  )
  assert ok and any('not compared' in line for line in lines)
  _, ok = reproduce.comparison(
    record, {f'{run}.metrics.accuracy': 0.8, f'{run}.cost.train_examples_per_second': 600.0}
  )
  assert not ok


def test_durations_read_as_the_docs_write_them():
  assert [reproduce.duration(s) for s in (21, 96, 788, 2894, 3725, None)] == [
    '21 s',
    '1 min 36 s',
    '13 min 8 s',
    '48 min 14 s',
    '1 h 2 min',
    'unknown',
  ]


@pytest.mark.slow
def test_record_then_reproduce_runs_the_command_and_compares(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  record.main(['demo', '--spread', 'accuracy=0.1', '--', PRINTS_NUMBERS])
  written = json.loads((tmp_path / 'demo.json').read_text())
  assert written['source'] == 'run' and written['command'] == PRINTS_NUMBERS
  assert written['numbers'] == {'accuracy': 0.75, 'nested.loss': 0.5}
  assert written['wall_seconds'] >= 0 and written['cpu_seconds'] >= 0
  assert set(written['load_average']) == {'min', 'mean', 'max'} and written['machine']['cores'] >= 1
  assert written['commit'] and written['date'].endswith('Z')
  assert written['software']['python'] and written['software']['jax'] == importlib.metadata.version('jax')
  reproduce.main(['demo'])
  assert 'accuracy' in capsys.readouterr().out
  written['numbers']['nested.loss'] = 0.25  # as if the code had changed
  store.write(written, tmp_path)
  with pytest.raises(SystemExit):
    reproduce.main(['demo'])
  assert 'OUTSIDE' in capsys.readouterr().out


@pytest.fixture
def scratch_folders(tmp_path_factory, monkeypatch):
  """Where the scratch checkouts of this test go (a failed command's stays)."""
  folder = tmp_path_factory.mktemp('scratch')
  monkeypatch.setattr(tempfile, 'tempdir', str(folder))
  return folder


@pytest.mark.slow
def test_a_failing_command_records_nothing_and_keeps_what_it_wrote(tmp_path, monkeypatch, scratch_folders):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  with pytest.raises(SystemExit, match='status 3') as refused:
    record.main(['broken', '--', 'mkdir runs/half_done; exit 3'])
  assert not list(tmp_path.iterdir())
  kept = pathlib.Path(str(refused.value).rsplit('kept in ', 1)[1])
  assert kept.parent == scratch_folders and (kept / 'runs' / 'half_done').is_dir()


@pytest.mark.slow
def test_a_run_whose_numbers_file_was_named_wrongly_is_recorded_from_its_kept_folder(
  tmp_path, monkeypatch, scratch_folders
):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  command = 'echo run >> ran.txt && echo \'{"accuracy": 0.5}\' > runs/right.json'
  with pytest.raises(SystemExit, match='wrote no .*wrong.json') as refused:
    record.main(['named', '--numbers_file', 'runs/wrong.json', '--', command])
  kept = pathlib.Path(str(refused.value).rsplit('kept in ', 1)[1])
  measured = json.loads((kept / store.KEPT_RUN).read_text())
  with pytest.raises(SystemExit, match='not of this command'):
    record.main(['named', '--numbers_file', 'runs/right.json', '--from_kept', str(kept), '--', 'echo other'])
  record.main(['named', '--numbers_file', 'runs/right.json', '--from_kept', str(kept), '--', command])
  written = store.load('named', tmp_path)
  assert written['numbers'] == {'accuracy': 0.5} and written['command'] == command
  assert written['wall_seconds'] == measured['wall_seconds'] and written['commit'] == measured['commit']
  assert (kept / 'ran.txt').read_text() == 'run\n'  # recorded without running again


def test_a_new_command_is_refused_before_it_runs_when_the_numbers_file_would_be_the_old_ones(
  tmp_path, monkeypatch
):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  store.write(
    _written('long', 'python train.py --steps 11000', 60.0) | {'numbers_file': 'runs/step11000.json'}
  )
  with pytest.raises(SystemExit, match='runs/step11000.json; give --numbers_file'):
    record.main(['long', '--', f'touch {tmp_path}/ran && python train.py --steps 9500'])
  assert not (tmp_path / 'ran').exists()


@pytest.mark.slow
def test_a_result_that_exits_with_its_stated_status_is_recorded_and_reproduced(
  tmp_path, monkeypatch, capsys, scratch_folders
):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  does_not_fit = 'echo \'{"fits": false, "needed_gib": 28.9}\'; exit 1'
  with pytest.raises(SystemExit, match='status 1: nothing recorded'):
    record.main(['too_big', '--', does_not_fit])
  record.main(['too_big', '--exit_status', '1', '--', does_not_fit])
  written = store.load('too_big', tmp_path)
  assert written['exit_status'] == 1 and written['numbers'] == {'fits': False, 'needed_gib': 28.9}
  reproduce.main(['too_big'])
  assert 'OUTSIDE' not in capsys.readouterr().out
  record.main(['too_big', '--', does_not_fit])  # a rerun keeps the stated status
  assert store.load('too_big', tmp_path)['exit_status'] == 1
  with pytest.raises(SystemExit, match='status 0, not the 1 its result exits with'):
    record.main(['too_big', '--', 'echo \'{"fits": true}\''])


@pytest.mark.slow
def test_a_command_runs_with_an_empty_runs_folder(tmp_path, monkeypatch):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  record.main(['fresh', '--', 'test ! -e runs/x && test -e train.py && echo \'{"n": 1}\''])
  assert store.load('fresh', tmp_path)['numbers'] == {'n': 1}


@pytest.mark.slow
def test_named_numbers_files_give_one_command_several_measurements(tmp_path, monkeypatch):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  command = (
    'mkdir -p runs/long && echo \'{"bleu": 40.5}\' > runs/long/end.json && '
    '(echo evaluating; echo \'{"bleu": 40.25}\') > runs/long/average.json'
  )
  files = ['--numbers_file', 'end=runs/long/end.json', '--numbers_file', 'average=runs/long/average.json']
  record.main(['long', *files, '--', command])
  written = store.load('long', tmp_path)
  assert written['numbers'] == {'end.bleu': 40.5, 'average.bleu': 40.25}
  assert written['numbers_file'] == {'end': 'runs/long/end.json', 'average': 'runs/long/average.json'}
  assert store.measure(command, written['numbers_file'], echo=False)['numbers'] == written['numbers']


def test_a_record_of_an_accelerator_is_rerun_only_where_there_is_one(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  gpu = 'GPU 0: NVIDIA H200 (UUID: GPU-8); GPU 1: NVIDIA H200 (UUID: GPU-9)'
  cpu_here = dict(store.machine(), accelerator=None)
  monkeypatch.setattr(store, 'machine', lambda: cpu_here)
  on_gpu = {**_written('on_gpu', 'exit 7', 60.0), 'machine': dict(cpu_here, accelerator=gpu)}
  store.write(on_gpu, tmp_path)
  with pytest.raises(
    SystemExit, match='^on_gpu: measured on 2 x NVIDIA H200; this machine has no accelerator$'
  ):
    reproduce.main(['on_gpu'])
  reproduce.main(['--all', '--max-minutes', '5'])
  assert '1 records need an accelerator' in capsys.readouterr().out  # and 'exit 7' never ran
  cell = tables.machine_cell(on_gpu['machine'])
  assert cell.startswith('2 x NVIDIA H200 (host: ') and 'UUID' not in cell


def _written(name, command, wall_seconds):
  return {
    'name': name,
    'source': 'run',
    'command': command,
    'commit': None,
    'date': None,
    'machine': store.machine(),
    'wall_seconds': wall_seconds,
    'numbers': {'n': 1},
  }


def test_several_numbers_files_are_each_named_once():
  assert record.parse_numbers_files([]) is None
  assert record.parse_numbers_files(['runs/sweep/posemb=none/results.json']) == (
    'runs/sweep/posemb=none/results.json'
  )
  assert record.parse_numbers_files(['end=runs/end.json']) == {'end': 'runs/end.json'}
  with pytest.raises(SystemExit, match='name each one'):
    record.parse_numbers_files(['end=runs/end.json', 'runs/average.json'])
  with pytest.raises(SystemExit, match="'end' is given twice"):
    record.parse_numbers_files(['end=runs/a.json', 'end=runs/b.json'])


# --- the committed records and tables ---------------------------------------------------------------


def test_a_record_written_before_another_is_not_an_uncommitted_change(tmp_path, monkeypatch):
  git = lambda *args: subprocess.run(['git', *args], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
  git('init', '-q')
  (tmp_path / 'results').mkdir()
  (tmp_path / 'results' / 'a.json').write_text('{}')
  (tmp_path / 'train.py').write_text('print(1)')
  git('add', '.')
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'x')
  monkeypatch.setattr(store, 'ROOT', tmp_path)
  (tmp_path / 'results' / 'a.json').write_text('{"numbers": {}}')  # an earlier record of a queue
  head, dirty = store.commit()
  assert len(head) == 40 and dirty is False
  (tmp_path / 'train.py').write_text('print(2)')
  assert store.commit()[1] is True


def test_a_record_names_the_commit_its_run_started_from(tmp_path, monkeypatch):
  monkeypatch.setattr(store, 'RESULTS', tmp_path)
  states = iter([('a' * 40, False), ('b' * 40, True)])  # a commit made, and a file changed, during the run
  monkeypatch.setattr(store, 'commit', lambda: next(states))
  measured = {'wall_seconds': 1.0, 'cpu_seconds': 1.0, 'load_average': None, 'numbers': {'accuracy': 0.5}}
  monkeypatch.setattr(store, 'measure', lambda *args, **kwargs: measured)
  record.main(['demo', '--', 'python train.py'])
  written = json.loads((tmp_path / 'demo.json').read_text())
  assert written['commit'] == 'a' * 40 and written['uncommitted_changes'] is False


def test_every_committed_record_loads_and_says_where_it_came_from():
  all_records = store.load_all()
  assert all_records
  for each in all_records:
    assert each['source'] in store.SOURCES
    # a command is python, with a variable set or after unpacking its data or an older commit's code,
    # or a script of CI's (the peer tier's environment and check)
    assert each['command'].startswith(
      ('python ', 'XLA_FLAGS=', 'GLIBC_TUNABLES=', 'mkdir -p runs/', 'bash .ci/')
    ), each['name']
    if each['source'] == 'transcribed':
      assert each['date'] is None and each['load_average'] is None, each['name']
      assert each['transcribed']['from'].startswith('docs/results.md'), each['name']
    for metric, spread in (each.get('spread') or {}).items():
      assert metric in each['numbers'] and spread['value'] >= 0, each['name']


def test_every_table_names_records_that_exist_and_every_cell_renders():
  by_name = {each['name']: each for each in store.load_all()}
  for table in tables.TABLES.values():
    assert tables.markdown(table, by_name).count('\n') == len(table.rows) + 1


def test_the_committed_tables_are_what_the_records_give():
  differ = [page for page, (text, made) in tables.pages().items() if text != made]
  assert not differ, f'{differ}: run python -m records.tables --write (or fix the records)'


def test_a_cell_names_only_numbers_of_its_record():
  with pytest.raises(tables.TableError, match='not among its numbers'):
    tables.render('{accuracy:.2%}', {'loss': 1.0}, 'r')
  assert tables.render('**{accuracy:.2%}**, {a.b:.1f}', {'accuracy': 0.9917, 'a.b': 2.0}, 'r') == (
    '**99.17%**, 2.0'
  )


def test_a_cell_aggregates_the_numbers_a_pattern_matches():
  numbers = {
    f'runs.a=1,seed={seed}.metrics.accuracy': value for seed, value in enumerate((0.9889, 0.9778, 0.9806))
  }
  numbers['runs.a=1,seed=0.metrics.loss'] = 0.3
  pattern = 'runs.a=1,seed=*.metrics.accuracy'
  assert tables.render(f'{{{pattern}|each:.2%}}', numbers, 'r') == '98.89%, 97.78%, 98.06%'
  assert tables.render(f'{{{pattern}|median:.2%}}', numbers, 'r') == '98.06%'
  assert tables.render(f'{{{pattern}|mean:.2%}} ± {{{pattern}|sd:.2%}}', numbers, 'r') == ('98.24% ± 0.58%')
  with pytest.raises(tables.TableError, match='no number of its matches'):
    tables.render('{runs.b=*.metrics.accuracy|mean}', numbers, 'r')
  with pytest.raises(tables.TableError, match=re.escape('needs |mean, |median, |sd or |each')):
    tables.render(f'{{{pattern}}}', numbers, 'r')
  with pytest.raises(tables.TableError, match='needs a pattern'):
    tables.render('{runs.a=1,seed=0.metrics.loss|mean}', numbers, 'r')
  with pytest.raises(tables.TableError, match='matches one number only'):
    tables.render('{runs.a=1,seed=*.metrics.loss|sd}', numbers, 'r')


def test_a_single_number_is_shown_in_gib_or_millions_and_takes_no_other_word():
  numbers = {
    'per_chip_bytes.total': 15_294_955_520,
    'parameters': 304_326_632,
    'collectives.all-reduce.count': 50,
  }
  text = '{per_chip_bytes.total|gib:.2f} GiB, {parameters|millions:.1f}M, {collectives.all-reduce.count}'
  assert tables.render(text, numbers, 'r') == '14.24 GiB, 304.3M, 50'
  with pytest.raises(tables.TableError, match='a single number takes a unit: gib, millions'):
    tables.render('{parameters|mb}', numbers, 'r')


def test_a_page_without_a_tables_end_marker_is_an_error():
  with pytest.raises(tables.TableError, match='no closing'):
    tables.with_tables('<!-- results table: t -->\n| a |\n', {'t': '| b |'}, 'page.md')
  text = 'x\n<!-- results table: t (note) -->\n| old |\n<!-- end of results table -->\ny'
  assert tables.with_tables(text, {'t': '| new |'}, 'p') == text.replace('| old |', '| new |')


def test_a_row_may_show_one_part_of_a_record_that_measured_several():
  record = {
    'name': 'chain',
    'what': 'the whole chain',
    'cells': {'result': 'both'},
    'numbers': {'first.accuracy': 0.5, 'second.accuracy': 0.75},
    'parts': {
      'first': {'what': 'the first run', 'cells': {'result': '{first.accuracy:.0%}'}},
      'second': {'what': 'the second run', 'cells': {'result': '{second.accuracy:.0%}'}},
    },
  }
  table = tables.Table('page.md', ('what', 'result'), ('chain', 'chain/second', 'chain/first'))
  assert tables.markdown(table, {'chain': record}).split('\n')[2:] == [
    '| the whole chain | both |',
    '| the second run | 75% |',
    '| the first run | 50% |',
  ]
  with pytest.raises(tables.TableError, match="part 'third' of record chain"):
    tables.markdown(tables.Table('page.md', ('what',), ('chain/third',)), {'chain': record})


def test_the_short_columns_name_the_config_the_wall_time_and_the_machine_in_a_word():
  epyc = {'label': None, 'cpu': 'AMD EPYC', 'cores': 2, 'accelerator': None}
  assert tables.machine_kind_cell(epyc | {'flags': ['avx2', 'avx512f']}) == 'CPU-A'
  assert tables.machine_kind_cell(epyc | {'flags': ['avx', 'avx2']}) == 'CPU-B'
  assert tables.machine_kind_cell(epyc | {'flags': ['avx2'], 'label': 'CPU-S'}) == 'CPU-S'
  gpu = epyc | {'cpu': 'Intel Xeon', 'cores': 16, 'flags': [], 'accelerator': 'GPU 0: NVIDIA H200 (UUID: x)'}
  assert tables.machine_kind_cell(gpu) == 'NVIDIA H200'
  other = epyc | {'cores': 8, 'flags': ['avx2']}  # not the 2-core kind the glossary names
  assert tables.machine_kind_cell(other) == 'AMD EPYC, 8 cores, AVX2'
  run = {
    'name': 'r',
    'command': 'python train.py --config configs/vit_digits.py --workdir runs/w && python evaluate.py --workdir runs/w',
    'numbers': {'seconds': 52.4},
    'wall_seconds': 83.0,
    'cells': {},
  }
  assert tables.cell(run, 'config') == '`configs/vit_digits.py`'
  assert tables.cell(run, 'wall time') == '1 min 23 s'
  part = run | {
    'cells': {'command': '`python train.py --config=configs/rnn_scan.py`', 'time': '{seconds:.0f} s'}
  }
  assert tables.cell(part, 'config') == '`configs/rnn_scan.py`'
  assert tables.cell(part, 'wall time') == '52 s'
  with pytest.raises(tables.TableError, match='names no --config'):
    tables.cell(run | {'command': 'python -m benchmarks.decode_speed'}, 'config')


def test_a_record_of_a_moved_module_reruns_it_under_its_present_name():
  command = 'python train.py --workdir runs/w && python -m vit.export_npz --workdir runs/w --out w.npz'
  assert store.command_today(command) == (
    'python train.py --workdir runs/w && python -m vit.weights.export_npz --workdir runs/w --out w.npz'
  )
