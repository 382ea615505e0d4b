"""tools/export_subnet.py --method uniform | random | taylor (mmdcs.selection.importance) from a
baseline DeiT-Tiny checkpoint of the digits demo config: each writes a valid subnet at the
budget (±1 %, measured on the built pruned classifier) and a pruned.pth that loads into it."""
import json
import os.path as osp

import pytest
import torch

from mmdcs.selection import SubnetSpec
from _tools import load_tool, run_main  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs/demo/deit-tiny_digits-cls.py')


@pytest.fixture(scope='module')
def baseline(tmp_path_factory, tiny_digits):
    """A digits DeiT-Tiny baseline config on the tiny set and a checkpoint of random weights."""
    from mmengine.config import Config

    from mmdcs.apis.subnet_io import build_model
    root = tmp_path_factory.mktemp('methods')
    cfg = Config.fromfile(CONFIG)
    cls = osp.join(tiny_digits, 'cls')
    for split in ('train', 'val', 'test'):
        cfg[f'{split}_dataloader'].dataset.data_root = cls
        cfg[f'{split}_dataloader'].num_workers = 0
        cfg[f'{split}_dataloader'].persistent_workers = False
    path = str(root / 'deit-tiny.py')
    cfg.dump(path)
    torch.manual_seed(0)
    model = build_model(cfg.model, 'mmpretrain')
    ckpt = str(root / 'baseline.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)
    return dict(config=path, ckpt=ckpt, model=model, root=root)


def _export(baseline, out, method, *extra):
    load_tool('tools/export_subnet.py').main(
        [baseline['config'], baseline['ckpt'], '--out', out, '--target-flops', '0.7',
         '--method', method] + list(extra))
    return SubnetSpec.load(osp.join(out, 'subnet.json'))


def _check_budget_and_weights(spec, out):
    m = spec.meta['budget']['measured']['flops']
    assert m['ratio'] <= 0.7 and 0.7 - m['ratio'] <= 0.01  # measured on the built model
    assert spec.meta['budget']['achieved_ratio'] == pytest.approx(m['ratio'], abs=1e-9)
    ckpt = torch.load(osp.join(out, 'pruned.pth'), map_location='cpu', weights_only=False)
    for b in spec.blocks:  # the pruned MLPs read D̃ channels
        assert ckpt['state_dict'][f'backbone.{b.name}.fc1.weight'].shape[1] == b.kept


@pytest.mark.parametrize('method', ['uniform', 'random', 'taylor'])
def test_each_method_writes_a_subnet_at_the_budget(baseline, tmp_path, method):
    out = str(tmp_path / method)
    spec = _export(baseline, out, method, '--seed', '1', '--taylor-batches', '2')
    assert spec.meta['method'] == method and spec.variant == 'dcs-arch2'
    _check_budget_and_weights(spec, out)
    if method in ('uniform', 'random'):  # the uniform widths: one ratio in every block
        assert len({b.kept for b in spec.blocks}) == 1 and len({b.dim for b in spec.blocks}) == 1
    if method == 'uniform':  # the largest weight norms of each block
        backbone = baseline['model'].backbone
        for b in spec.blocks:
            norms = backbone.get_submodule(b.name).channel_norms()
            cut = float(norms.sort(descending=True).values[b.kept - 1])
            swapped = set(b.keep) ^ set(norms.argsort(descending=True)[:b.kept].tolist())
            assert all(abs(float(norms[i]) - cut) <= 1e-5 * cut for i in swapped)


def test_random_takes_the_widths_of_another_subnet_and_its_seed(baseline, tmp_path):
    ref = _export(baseline, str(tmp_path / 'taylor'), 'taylor', '--taylor-batches', '1')
    widths = osp.join(str(tmp_path / 'taylor'), 'subnet.json')
    s0 = _export(baseline, str(tmp_path / 'r0'), 'random', '--widths-from', widths)
    s1 = _export(baseline, str(tmp_path / 'r1'), 'random', '--widths-from', widths, '--seed',
                 '1')
    assert [b.kept for b in s0.blocks] == [b.kept for b in ref.blocks]
    assert [b.kept for b in s1.blocks] == [b.kept for b in ref.blocks]
    assert [b.keep for b in s0.blocks] != [b.keep for b in s1.blocks]
    assert (s0.meta['seed'], s1.meta['seed']) == (0, 1)
    _check_budget_and_weights(s0, str(tmp_path / 'r0'))


def test_method_refusals_are_one_line_exit_2(baseline, tmp_path, capsys):
    code, err = run_main('tools/export_subnet.py',
                         [baseline['config'], baseline['ckpt'], '--out', str(tmp_path / 'a'),
                          '--method', 'taylor'], capsys)
    assert code == 2 and '--method taylor needs a budget' in err
    bad = tmp_path / 'bad.json'
    bad.write_text('{not json')
    code, err = run_main('tools/export_subnet.py',
                         [baseline['config'], baseline['ckpt'], '--out', str(tmp_path / 'b'),
                          '--method', 'random', '--target-flops', '0.7', '--widths-from',
                          str(bad)], capsys)
    assert code == 2 and 'bad.json' in err and len(err.strip().splitlines()) == 1
    assert not osp.exists(tmp_path / 'b' / 'subnet.json')
    code, err = run_main('tools/export_subnet.py',
                         [baseline['config'], baseline['ckpt'], '--out', str(tmp_path / 'c'),
                          '--method', 'uniform', '--target-flops', '0.7', '--widths-from',
                          str(bad)], capsys)
    assert code == 2 and '--widths-from is for --method random' in err
    json.dumps(err)
