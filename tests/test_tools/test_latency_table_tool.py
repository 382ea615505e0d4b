"""tools/analysis/latency_table.py: bad input is one line and exit 2 with nothing written; a
small real run writes a table that loads back for the config (no assertion on any time)."""
import json
import os.path as osp

import pytest
from _tools import ROOT, run_main  # noqa: E402 (tests/ is on sys.path)

TOOL = 'tools/analysis/latency_table.py'
SEARCH = osp.join(ROOT, 'configs/demo/kcr-mobilevit-xs_search_digits.py')
CLS = osp.join(ROOT, 'configs/demo/mobilevit-xs_digits-cls.py')


def _refused(capsys, argv):
    code, err = run_main(TOOL, argv, capsys, cwd=None)
    assert code == 2, err
    assert 'Traceback' not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    return lines[0]


@pytest.mark.parametrize('extra, match', [
    (['--threads', '0'], 'threads'),
    (['--batch', 'x'], 'batch'),
    (['--shape', '0'], 'shape'),
    (['--dtype', 'fp8'], 'dtype'),
    (['--device', 'tpu'], 'device'),
    (['--validate', '-1'], 'validate'),
])
def test_bad_arguments(extra, match, capsys, tmp_path):
    line = _refused(capsys, [SEARCH, '--out', str(tmp_path / 't.json')] + extra)
    assert match in line
    assert not (tmp_path / 't.json').exists()


def test_refusals_before_any_work(capsys, tmp_path):
    out = tmp_path / 't.json'
    out.write_text('{}')
    assert 'already exists' in _refused(capsys, [SEARCH, '--out', str(out)])
    assert out.read_text() == '{}'
    new = tmp_path / 'n.json'
    assert 'no architecture parameters' in _refused(capsys, [CLS, '--out', str(new)])
    assert not new.exists()
    assert 'not found' in _refused(capsys, [str(tmp_path / 'none.py'), '--out', str(new)])


def test_small_run_writes_a_table_for_the_config(capsys, tmp_path):
    from mmdcs.apis.latency_io import config_backbones, table_for
    from mmdcs.apis.launch import UserError
    out = tmp_path / 'table.json'
    code = None
    try:
        from _tools import load_tool
        load_tool(TOOL).main([SEARCH, '--out', str(out), '--shape', '32', '--rounds', '1',
                              '--multiple-of', '48', '--validate', '1',
                              '--validate-rounds', '1'])
    except SystemExit as e:  # pragma: no cover - a refusal would fail below
        code = e.code
    printed = capsys.readouterr().out
    assert code is None, printed
    assert 'grid point' in printed and 'built in' in printed and 'mean abs. error' in printed
    table = json.loads(out.read_text())
    assert table['input_shape'] == [32, 32] and table['threads'] == 1
    assert table['validation']['k'] == 1
    sup, _, size, _ = config_backbones(SEARCH, (32, 32))
    cost = table_for(str(out), sup, size)
    assert cost.unit_dims()
    with pytest.warns(UserWarning, match='threads = 1.*threads = 2'):
        table_for(str(out), sup, size, threads=2)
    # a table for another variant or input size: one line naming the file and what differs
    dcs_config = osp.join(ROOT, 'configs/demo/dcs-mobilevit-xs_search_digits.py')
    dcs, _, _, _ = config_backbones(dcs_config, (32, 32))
    with pytest.raises(UserError, match=r'table.json: .*variant'):
        table_for(str(out), dcs, size)
    with pytest.raises(UserError, match='input 32x32.*64x64'):
        table_for(str(out), sup, (64, 64))
    with pytest.raises(UserError, match='not found'):
        table_for(str(tmp_path / 'none.json'), sup, size)


def test_a_select_heads_config_gets_head_units(capsys, tmp_path):
    """A small real run on a select_heads supernet (DeiT-Tiny at 32x32): the table has a head
    unit per attention (every head count) and loads back for the config; the same config
    without select_heads refuses it in one line naming the file (no assertion on any time)."""
    from mmdcs.apis.latency_io import config_backbones, table_for
    from mmdcs.apis.launch import UserError
    from _tools import load_tool
    config = osp.join(ROOT, 'configs/demo/kcr-deit-tiny_search_digits.py')
    out = tmp_path / 'heads.json'
    heads = ['--cfg-options', 'model.backbone.select_heads=True']
    load_tool(TOOL).main([config, '--out', str(out), '--shape', '32', '--rounds', '1',
                          '--multiple-of', '96'] + heads)
    assert 'grid point 3/3' in capsys.readouterr().out
    table = json.loads(out.read_text())
    assert table['format'] == 'mmdcs.latency_table/2'
    units = [u for u in table['units'] if 'heads' in u]
    assert [u['path'] for u in units] == [f'blocks.{i}.attn' for i in range(12)]
    assert all(u['grid_heads'] == [1, 2, 3] and len(u['ms']) == 3 for u in units)
    sup, _, size, _ = config_backbones(config, (32, 32), {'model.backbone.select_heads': True})
    assert table_for(str(out), sup, size).head_dims == {u['path']: 3 for u in units}
    plain, _, _, _ = config_backbones(config, (32, 32))
    with pytest.raises(UserError, match=r'heads.json: .*select_heads=True \(table\) vs False'):
        table_for(str(out), plain, size)
