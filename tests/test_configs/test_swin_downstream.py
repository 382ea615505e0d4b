"""Downstream: the mmdet Mask R-CNN and the mmseg UperNet configs with an mmdcs Swin (KCR supernet
and a subnet exported from it) build and take one training step on CPU, then predict."""
import os.path as osp

import pytest
import torch

from _mm_batches import seg_batch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DET_CFG = osp.join(ROOT, 'configs/det/mask-rcnn_swin-t-kcr-supernet_fpn_1x_coco.py')
SEG_CFG = osp.join(ROOT, 'configs/seg/upernet_swin-t-kcr-supernet_512x512_160k_ade20k.py')

pytest.importorskip('mmdet')
pytest.importorskip('mmseg')


@pytest.fixture(scope='module')
def subnet_path(tmp_path_factory):
    """A random-α subnet of the Swin-T KCR supernet, as the JSON a search exports."""
    from mmdcs.models.backbones.swin import Swin
    from mmdcs.selection import arch_parameters
    sup = Swin('swin-t', 'kcr')
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in arch_parameters(sup):
            p.copy_(torch.randn(p.shape, generator=g))
    path = tmp_path_factory.mktemp('swin') / 'subnet.json'
    sup.export_subnet(source='test').save(str(path))
    return str(path)


def _load(cfg_path, subnet, **model_updates):
    from mmengine.config import Config
    cfg = Config.fromfile(cfg_path)
    if subnet is not None:
        cfg.model.backbone.subnet = subnet
    cfg.merge_from_dict({f'model.{k}': v for k, v in model_updates.items()})
    return cfg


def _train_step(model, cfg, data):
    """One loss forward + backward + optimizer step with the config's optimizer wrapper."""
    from mmengine.optim import build_optim_wrapper
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    model.train()
    before = {n: p.detach().clone() for n, p in model.backbone.named_parameters()
              if p.requires_grad}
    data = model.data_preprocessor(data, True)
    losses = model(**data, mode='loss')
    loss, log_vars = model.parse_losses(losses)
    assert torch.isfinite(loss)
    optim_wrapper.update_params(loss)
    moved = [n for n, p in model.backbone.named_parameters() if p.requires_grad
             and not torch.equal(p, before[n])]
    assert any('layers.0.blocks.0.mlp.fc1' in n for n in moved)
    return log_vars


def _check_backbone(model, subnet):
    from mmdcs.models.backbones.swin import Swin
    assert isinstance(model.backbone, Swin)
    assert model.backbone.is_supernet == (subnet is None)


@pytest.mark.parametrize('use_subnet', [False, True], ids=['supernet', 'subnet'])
def test_mask_rcnn_swin_trains_one_step_and_predicts(use_subnet, subnet_path):
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmdet.utils import register_all_modules
    from mmengine.registry import DefaultScope
    register_all_modules(init_default_scope=False)
    subnet = subnet_path if use_subnet else None
    # fewer proposals and sampled RoIs than the 1x recipe: the step tests the backbone, on CPU
    cfg = _load(DET_CFG, subnet,
                train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100),
                               rcnn=dict(sampler=dict(num=64))),
                test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=100),
                              rcnn=dict(max_per_img=20)))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
        _check_backbone(model, subnet)
        data = demo_mm_inputs(batch_size=1, image_shapes=[(3, 128, 160)], num_classes=80,
                              with_mask=True)
        log_vars = _train_step(model, cfg, data)
        assert {'loss_rpn_cls', 'loss_cls', 'loss_mask'} <= set(log_vars)
        model.eval()
        with torch.no_grad():
            data = model.data_preprocessor(data, False)
            results = model(**data, mode='predict')
    assert len(results) == 1 and hasattr(results[0], 'pred_instances')


@pytest.mark.parametrize('use_subnet', [False, True], ids=['supernet', 'subnet'])
def test_upernet_swin_trains_one_step_and_predicts(use_subnet, subnet_path):
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    subnet = subnet_path if use_subnet else None
    # small crops on CPU (64×64: stage maps 16×16 .. 2×2): the config's 512×512 padding would
    # make the step slow
    cfg = _load(SEG_CFG, subnet, data_preprocessor=dict(size=(64, 64)))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = revert_sync_batchnorm(MODELS.build(cfg.model))
        _check_backbone(model, subnet)
        data = seg_batch()  # two images: UperNet's 1×1 pyramid pooling has BatchNorm
        log_vars = _train_step(model, cfg, data)
        assert {'decode.loss_ce', 'aux.loss_ce'} <= set(log_vars)
        model.eval()
        with torch.no_grad():
            data = model.data_preprocessor(data, False)
            results = model(**data, mode='predict')
    assert [r.pred_sem_seg.data.shape for r in results] == [(1, 64, 64)] * 2
