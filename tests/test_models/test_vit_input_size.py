"""ViT at an input size that the patch size (16) does not divide: dense outputs
(``out_type='featmap'``, detection / segmentation) zero-pad the image at the right and bottom as
mmseg's / mmpretrain's ViT do; a classifier refuses it with an ``InputError`` that the tools
turn into one line, exit 2 (not a traceback)."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from mmdcs.models.backbones.vit import ViT
from mmdcs.utils import InputError


def _vit(**kwargs):
    torch.manual_seed(0)
    return ViT('deit-tiny', 'kcr', img_size=64, **kwargs).eval()


def test_featmap_pads_at_the_right_and_bottom():
    m = _vit(out_type='featmap', out_indices=(3, 11))
    assert m.dynamic_img_pad
    x = torch.randn(2, 3, 70, 90, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = m(x)
        ref = m(F.pad(x, (0, 96 - 90, 0, 80 - 70)))
    assert [tuple(o.shape) for o in outs] == [(2, 192, 5, 6)] * 2
    assert all(torch.equal(o, r) for o, r in zip(outs, ref))


def test_classifier_refuses_with_an_input_error_unless_asked_to_pad():
    m = _vit()
    assert not m.dynamic_img_pad
    x = torch.randn(1, 3, 72, 72)
    with pytest.raises(InputError, match='72x72 is not divisible by the patch size 16'):
        m(x)
    with torch.no_grad():
        (padded, ) = _vit(dynamic_img_pad=True)(x)
    assert padded.shape == (1, 192)
    with pytest.raises(InputError):
        _vit(out_type='featmap', dynamic_img_pad=False)(x)


def test_input_error_is_one_line_exit_2(capsys):
    from mmdcs.apis.launch import user_errors
    with pytest.raises(SystemExit) as e:
        with user_errors():
            _vit()(torch.randn(1, 3, 72, 72))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('error: ViT: the input size 72x72')


def test_test_py_at_a_size_16_does_not_divide(tmp_path, capsys, repo_root):
    """tools/test.py (its ``main`` in this process) with a classification pipeline that gives
    72×72 images."""
    from _tools import run_main
    from mmdcs.datasets.digits import build_classification
    from mmdcs.apis.subnet_io import build_model, load_task_config
    build_classification(str(tmp_path / 'digits'), size=64, seed=0, max_per_class=2)
    base = osp.join(repo_root, 'configs/demo/deit-tiny_digits-cls.py')
    cfg_path = tmp_path / 'deit-72.py'
    cfg_path.write_text(
        f"_base_ = {base!r}\n"
        "test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=72),\n"
        "                 dict(type='PackInputs')]\n"
        f"test_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict("
        f"data_root={str(tmp_path / 'digits' / 'cls')!r}, pipeline=test_pipeline))\n")
    cfg, scope = load_task_config(str(cfg_path))
    ckpt = str(tmp_path / 'deit.pth')
    torch.save({'state_dict': build_model(cfg.model, scope).state_dict(), 'meta': {}}, ckpt)
    code, err = run_main('tools/test.py', [str(cfg_path), ckpt, '--work-dir',
                                           str(tmp_path / 'wd')], capsys)
    assert code == 2, err[-3000:]
    assert 'Traceback' not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith('error')]
    assert len(lines) == 1 and 'not divisible by the patch size 16' in lines[0], lines
