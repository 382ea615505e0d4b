"""tools/convert/timm_to_mmdcs.py: a timm checkpoint becomes an mmdcs classifier checkpoint that
gives timm's logits, and initialises a DCS/KCR supernet with every gate open."""
import os.path as osp

import pytest
import timm
import torch
from mmengine.registry import DefaultScope
from mmengine.runner import load_checkpoint

from mmdcs.registry import MODELS
from _tools import assert_close_scaled, run_main  # noqa: E402 (tests/ is on sys.path)


def _classifier(backbone):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(dict(
            type='ImageClassifier', backbone=backbone,
            head=dict(type='LinearClsHead', num_classes=1000, in_channels=192,
                      loss=dict(type='CrossEntropyLoss')))).eval()


def test_convert_timm_checkpoint_file_gives_timm_logits(tmp_path, run_tool):
    torch.manual_seed(0)
    ref = timm.create_model('deit_tiny_patch16_224', pretrained=False).eval()
    src = str(tmp_path / 'deit_tiny.pth')
    torch.save(ref.state_dict(), src)
    dst = str(tmp_path / 'converted.pth')
    proc = run_tool(['tools/convert/timm_to_mmdcs.py', 'vit', 'deit-tiny', src, dst])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'wrote' in proc.stdout
    x = torch.randn(1, 3, 224, 224)
    for variant in ('baseline', 'dcs', 'kcr'):
        model = _classifier(dict(type='mmdcs.ViT', arch='deit-tiny', variant=variant))
        load_checkpoint(model, dst, map_location='cpu', strict=variant == 'baseline')
        with torch.no_grad():
            assert_close_scaled(model(x, mode='tensor'), ref(x), 1e-4)


def test_convert_refuses_bad_input(tmp_path, run_tool, capsys):
    """One refusal through a real process (its exit code and one line), the others in this
    process (the same ``main``)."""
    proc = run_tool(['tools/convert/timm_to_mmdcs.py', 'vit', 'vit-h14', '--random-init',
                     str(tmp_path / 'x.pth')])
    assert proc.returncode != 0 and "unknown arch 'vit-h14'" in proc.stderr
    code, err = run_main('tools/convert/timm_to_mmdcs.py', [
        'vit', 'deit-tiny', str(tmp_path / 'missing.pth'), str(tmp_path / 'x.pth')], capsys)
    assert code != 0 and 'source checkpoint not found' in err
    # weights of another model (here: Swin-like keys) are not a ViT checkpoint
    torch.save({'layers.0.blocks.0.attn.relative_position_bias_table': torch.zeros(169, 3),
                'head.fc.weight': torch.zeros(1000, 768)}, str(tmp_path / 'swin.pth'))
    code, err = run_main('tools/convert/timm_to_mmdcs.py', [
        'vit', 'deit-tiny', str(tmp_path / 'swin.pth'), str(tmp_path / 'x.pth')], capsys)
    assert code != 0
    assert not osp.exists(str(tmp_path / 'x.pth'))
