"""tools/export_subnet.py: a supernet classifier with random gates → subnet.json + pruned.pth,
from which the pruned classifier is rebuilt and reproduces the supernet; and its errors."""
import copy
import json
import os.path as osp
import re

import pytest
import torch

from mmdcs.selection import SubnetSpec, apply_subnet_, file_sha256, selector_layout
from mmdcs.utils.checkpoint import load_checkpoint_file
from _tools import assert_close_scaled, load_tool  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

CONFIG = """default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='{variant}', img_size=64),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
"""


def _build(model_cfg):
    from mmdcs.apis.subnet_io import build_model
    import mmpretrain.utils
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    return build_model(model_cfg, 'mmpretrain').eval()


def _write_config(root, variant):
    from mmengine.config import Config
    path = osp.join(str(root), f'deit-tiny_{variant}.py')
    with open(path, 'w') as f:
        f.write(CONFIG.format(variant=variant))
    return path, Config.fromfile(path)


@pytest.fixture(scope='module')
def supernet(tmp_path_factory):
    """A DCS supernet classifier with random α and Linear_θ, saved as a checkpoint."""
    root = tmp_path_factory.mktemp('export')
    config, cfg = _write_config(root, 'dcs')
    torch.manual_seed(0)
    model = _build(cfg.model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('select.alpha'):
                p.copy_(torch.randn(p.shape, generator=g) + 0.3)
            elif name.endswith('qk_select.theta.weight'):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    ckpt = osp.join(str(root), 'supernet.pth')
    torch.save({'state_dict': model.state_dict(),
                'meta': {'dataset_meta': {'classes': [str(i) for i in range(10)]}}}, ckpt)
    return dict(root=root, config=config, cfg=cfg, model=model, ckpt=ckpt)


def _tool():
    return load_tool('tools/export_subnet.py')


def test_export_rebuild_and_equal_logits(supernet, run_tool):
    out = osp.join(str(supernet['root']), 'subnet')
    proc = run_tool(['tools/export_subnet.py', supernet['config'], supernet['ckpt'], '--out',
                     out], timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    model = supernet['model']

    # subnet.json: the deterministic gates of the supernet, fitting its layout
    spec = SubnetSpec.load(osp.join(out, 'subnet.json'))
    spec.check('vit', 'deit-tiny', selector_layout(model.backbone), 'dcs')
    for b in spec.blocks:
        alpha = model.backbone.get_submodule(b.name).select.alpha
        assert b.keep == torch.nonzero(alpha > 0).flatten().tolist()
    assert 0 < spec.kept_ratio < 1
    assert spec.meta['source_checkpoint_sha256'] == file_sha256(supernet['ckpt'])

    # the pruned classifier from the spec alone + pruned.pth (strict) = the supernet
    model_cfg = copy.deepcopy(supernet['cfg'].model)
    model_cfg.backbone.subnet = osp.join(out, 'subnet.json')
    pruned = _build(model_cfg)
    ckpt = load_checkpoint_file(osp.join(out, 'pruned.pth'))
    assert set(ckpt) >= {'state_dict', 'meta'}
    assert ckpt['meta']['dataset_meta']['classes'][0] == '0'
    pruned.load_state_dict(ckpt['state_dict'], strict=True)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(x, mode='tensor')
        got = pruned(x, mode='tensor')
    assert_close_scaled(got, ref, 1e-4)

    # pruning in place on the supernet gives the same weights as prune_state_dict
    inplace = _build(supernet['cfg'].model)
    inplace.load_state_dict(model.state_dict())
    apply_subnet_(inplace.backbone, spec)
    mine = inplace.state_dict()
    assert set(mine) == set(ckpt['state_dict'])
    assert all(torch.equal(mine[k], ckpt['state_dict'][k]) for k in mine)

    # the printed report: FLOPs after < before, the per-block table, the usage
    rows = dict(re.findall(r'\| (backbone, \w+) \| [\d,]+ \([^)]*\) \| ([\d,]+) ', proc.stdout))
    before = int(rows['backbone, supernet'].replace(',', ''))
    after = int(rows['backbone, pruned'].replace(',', ''))
    assert 0 < after < before
    assert ckpt['meta']['flops'] == dict(backbone_supernet=before, backbone_pruned=after)
    assert '| blocks.11.mlp | 192 |' in proc.stdout
    assert 'max |diff| = ' in proc.stdout and '(equal)' in proc.stdout
    assert f'model.backbone.subnet={osp.join(out, "subnet.json")}' in proc.stdout
    assert f'load_from={osp.join(out, "pruned.pth")}' in proc.stdout


def test_baseline_or_pruned_backbone_is_refused(supernet, tmp_path, capsys):
    tool = _tool()
    config, cfg = _write_config(tmp_path, 'baseline')
    ckpt = str(tmp_path / 'baseline.pth')
    torch.save({'state_dict': _build(cfg.model).state_dict()}, ckpt)
    with pytest.raises(SystemExit) as e:
        tool.main([config, ckpt, '--out', str(tmp_path / 'out')])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'has no architecture parameters: a baseline or an already pruned backbone' in err
    assert 'Traceback' not in err and not osp.exists(tmp_path / 'out')

    # an already pruned backbone (built from a subnet) is refused the same way
    spec = supernet['model'].backbone.export_subnet()
    pruned_cfg = tmp_path / 'pruned_cfg.py'
    pruned_cfg.write_text(CONFIG.format(variant='dcs') +
                          f'model["backbone"]["subnet"] = {json.dumps(spec.to_dict())}\n')
    with pytest.raises(SystemExit) as e:
        tool.main([str(pruned_cfg), ckpt, '--out', str(tmp_path / 'out')])
    assert e.value.code == 2
    assert 'has no architecture parameters' in capsys.readouterr().err


def test_missing_config_or_checkpoint(supernet, tmp_path, capsys):
    tool = _tool()
    with pytest.raises(SystemExit) as e:
        tool.main([str(tmp_path / 'nope.py'), supernet['ckpt'], '--out', str(tmp_path)])
    assert e.value.code == 2
    assert 'config file not found' in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        tool.main([supernet['config'], str(tmp_path / 'nope.pth'), '--out', str(tmp_path)])
    assert e.value.code == 2
    assert 'checkpoint not found' in capsys.readouterr().err
    # a checkpoint of another model
    other = str(tmp_path / 'other.pth')
    torch.save({'state_dict': {'backbone.cls_token': torch.zeros(1, 1, 192)}}, other)
    with pytest.raises(SystemExit) as e:
        tool.main([supernet['config'], other, '--out', str(tmp_path)])
    assert e.value.code == 2
    assert f'{other} does not fit the model (' in capsys.readouterr().err  # one rule, as test.py


def test_export_multiple_of_rounds_widths_and_keeps_outputs(supernet, tmp_path, capsys):
    tool = _tool()
    out = str(tmp_path / 'rounded')
    tool.main([supernet['config'], supernet['ckpt'], '--out', out, '--multiple-of', '8'])
    printed = capsys.readouterr().out
    assert '(equal)' in printed
    spec = SubnetSpec.load(osp.join(out, 'subnet.json'))
    assert all(b.kept % 8 == 0 for b in spec.blocks) and any(b.pad for b in spec.blocks)
    model_cfg = copy.deepcopy(supernet['cfg'].model)
    model_cfg.backbone.subnet = osp.join(out, 'subnet.json')
    pruned = _build(model_cfg)
    ckpt = load_checkpoint_file(osp.join(out, 'pruned.pth'))
    pruned.load_state_dict(ckpt['state_dict'], strict=True)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close_scaled(pruned(x, mode='tensor'), supernet['model'](x, mode='tensor'), 1e-4)
    with pytest.raises(SystemExit):
        tool.main([supernet['config'], supernet['ckpt'], '--out', out, '--multiple-of', '0'])
    assert 'argument --multiple-of: must be an integer ≥ 1, got 0' in capsys.readouterr().err
