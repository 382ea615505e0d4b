"""Every detection config of ``configs/det`` at full scale: it parses, its schedule is the
paper's, its datasets and data pipelines build and run on a fake COCO sample, its detector builds
(subnet configs from a freshly exported subnet), loads an ImageNet classifier checkpoint through
its ``init_cfg``, takes one training step with the config's optimizer wrapper and predicts.

The steps run on small inputs (two 320×320 images for SSDLite, one 128×160 image with fewer
proposals for the R-CNNs) so that each case takes seconds on a CPU."""
import glob
import os.path as osp

import numpy as np
import pytest
import torch

pytest.importorskip('mmdet')

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG_DIR = osp.join(ROOT, 'configs', 'det')

# What each config must say: the detector, the backbone, and the recipe (DCS paper 4.2/4.3,
# KCR paper 4.4, mmdet's Swin recipe); 'subnet': built from an exported subnet file.
SSDLITE = dict(recipe='ssdlite', detector='SingleStageDetector')
MASK_RCNN_COS = dict(recipe='mask-rcnn-adamw-cos', detector='MaskRCNN')
MASK_RCNN_SWIN = dict(recipe='mask-rcnn-swin', detector='MaskRCNN')
CASCADE = dict(recipe='cascade-ms-3x', detector='CascadeRCNN')
EXPECTED = {
    'ssdlite_mobilevit-xs_200e_coco.py':
    dict(SSDLITE, backbone='MobileViT', arch='mobilevit-xs', variant='baseline', channels=(80, 384)),
    'ssdlite_mobilevit-xs-dcs_200e_coco.py':
    dict(SSDLITE, backbone='MobileViT', arch='mobilevit-xs', variant='dcs', subnet=True,
         channels=(80, 384)),
    'ssdlite_mobilevit-s_200e_coco.py':
    dict(SSDLITE, backbone='MobileViT', arch='mobilevit-s', variant='baseline', channels=(128, 640)),
    'ssdlite_mobilevit-s-dcs_200e_coco.py':
    dict(SSDLITE, backbone='MobileViT', arch='mobilevit-s', variant='dcs', subnet=True,
         channels=(128, 640)),
    'ssdlite_efficientvit-b1_200e_coco.py':
    dict(SSDLITE, backbone='EfficientViT', arch='efficientvit-b1', variant='baseline',
         channels=(128, 256)),
    'ssdlite_efficientvit-b1-dcs_200e_coco.py':
    dict(SSDLITE, backbone='EfficientViT', arch='efficientvit-b1', variant='dcs', subnet=True,
         channels=(128, 256)),
    'mask-rcnn_efficientvit-b1_fpn_1x_coco.py':
    dict(MASK_RCNN_COS, backbone='EfficientViT', arch='efficientvit-b1', variant='baseline',
         channels=(32, 64, 128, 256)),
    'mask-rcnn_efficientvit-b1-dcs_fpn_1x_coco.py':
    dict(MASK_RCNN_COS, backbone='EfficientViT', arch='efficientvit-b1', variant='dcs',
         subnet=True, channels=(32, 64, 128, 256)),
    'mask-rcnn_swin-t_fpn_1x_coco.py':
    dict(MASK_RCNN_SWIN, backbone='Swin', arch='swin-t', variant='baseline', drop_path=0.2,
         channels=(96, 192, 384, 768)),
    'mask-rcnn_swin-t-kcr_fpn_1x_coco.py':
    dict(MASK_RCNN_SWIN, backbone='Swin', arch='swin-t', variant='kcr', subnet=True,
         drop_path=0.2, channels=(96, 192, 384, 768)),
    'mask-rcnn_swin-t-kcr-supernet_fpn_1x_coco.py':
    dict(MASK_RCNN_SWIN, backbone='Swin', arch='swin-t', variant='kcr', drop_path=0.2,
         channels=(96, 192, 384, 768)),
    'mask-rcnn_swin-b_fpn_1x_coco.py':
    dict(MASK_RCNN_SWIN, backbone='Swin', arch='swin-b', variant='baseline', drop_path=0.3,
         channels=(128, 256, 512, 1024)),
    'mask-rcnn_swin-b-kcr_fpn_1x_coco.py':
    dict(MASK_RCNN_SWIN, backbone='Swin', arch='swin-b', variant='kcr', subnet=True,
         drop_path=0.3, channels=(128, 256, 512, 1024)),
    'cascade-mask-rcnn_swin-t_fpn_ms-3x_coco.py':
    dict(CASCADE, backbone='Swin', arch='swin-t', variant='baseline', drop_path=0.2,
         channels=(96, 192, 384, 768)),
    'cascade-mask-rcnn_swin-t-kcr_fpn_ms-3x_coco.py':
    dict(CASCADE, backbone='Swin', arch='swin-t', variant='kcr', subnet=True, drop_path=0.2,
         channels=(96, 192, 384, 768)),
    'cascade-mask-rcnn_swin-b_fpn_ms-3x_coco.py':
    dict(CASCADE, backbone='Swin', arch='swin-b', variant='baseline', drop_path=0.3,
         channels=(128, 256, 512, 1024)),
    'cascade-mask-rcnn_swin-b-kcr_fpn_ms-3x_coco.py':
    dict(CASCADE, backbone='Swin', arch='swin-b', variant='kcr', subnet=True, drop_path=0.3,
         channels=(128, 256, 512, 1024)),
}
CONFIGS = sorted(EXPECTED)


def _load(name):
    from mmengine.config import Config
    return Config.fromfile(osp.join(CONFIG_DIR, name))


def _scheduler(cfg, type_):
    found = [s for s in cfg.param_scheduler if s['type'] == type_]
    assert len(found) == 1, f'{type_} not in {cfg.param_scheduler}'
    return found[0]


def _types(pipeline):
    return [t['type'] for t in pipeline]


def test_every_config_is_listed():
    """A new config must come with its expected settings here."""
    on_disk = sorted(osp.basename(p) for p in glob.glob(osp.join(CONFIG_DIR, '*.py')))
    assert on_disk == CONFIGS


# ----------------------------------------------------------------------------- the recipes
def _check_ssdlite(cfg, exp):
    """DCS paper 4.3 (+ ml-cvnets' MobileViT SSDLite recipe): 320², AdamW, cosine 9e-4 -> 1.6e-6,
    200 epochs, batch 128, EMA."""
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay, tuple(opt.betas)) == ('AdamW', 9e-4, 0.01,
                                                                     (0.9, 0.999))
    assert cfg.train_cfg.max_epochs == 200
    cos = _scheduler(cfg, 'CosineAnnealingLR')
    assert cos.by_epoch and cos.eta_min == 1.6e-6 and cos.T_max == cos.end == 200
    warm = _scheduler(cfg, 'LinearLR')
    assert not warm.by_epoch and warm.end == 500
    # 200 plain epochs: no RepeatDataset
    assert cfg.train_dataloader.dataset.type == 'CocoDataset'
    assert cfg.train_dataloader.batch_size * 4 == cfg.auto_scale_lr.base_batch_size == 128
    ema = [h for h in cfg.custom_hooks if h['type'] == 'EMAHook']
    assert len(ema) == 1 and ema[0]['momentum'] == 0.0005
    for pipeline in (cfg.train_dataloader.dataset.pipeline, cfg.test_dataloader.dataset.pipeline):
        resize = [t for t in pipeline if t['type'] == 'Resize']
        assert [tuple(t['scale']) for t in resize] == [(320, 320)]
    m = cfg.model
    assert tuple(m.neck.in_channels) == exp['channels']
    assert tuple(m.neck.out_channels)[:2] == exp['channels']
    assert tuple(m.bbox_head.in_channels) == tuple(m.neck.out_channels)
    assert tuple(m.backbone.out_indices) == (3, 4)  # strides 16 and 32 in both families


def _check_mask_rcnn_cos(cfg, exp):
    """DCS paper 4.2: Mask R-CNN + FPN, 12 epochs, AdamW lr 1e-3, cosine."""
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr) == ('AdamW', 1e-3)
    assert cfg.train_cfg.max_epochs == 12
    cos = _scheduler(cfg, 'CosineAnnealingLR')
    assert cos.by_epoch and cos.T_max == cos.end == 12
    assert not any(s['type'] == 'MultiStepLR' for s in cfg.param_scheduler)
    assert tuple(cfg.model.backbone.out_indices) == (1, 2, 3, 4)  # strides 4..32
    assert cfg.model.backbone.norm_eval


def _check_swin_optim(cfg):
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay) == ('AdamW', 1e-4, 0.05)
    keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    assert keys['relative_position_bias_table'].decay_mult == 0 == keys['norm'].decay_mult
    assert cfg.train_dataloader.batch_size * 8 == 16


def _check_mask_rcnn_swin(cfg, exp):
    """mmdet's Swin Mask R-CNN 1x recipe."""
    _check_swin_optim(cfg)
    assert cfg.train_cfg.max_epochs == 12
    assert list(_scheduler(cfg, 'MultiStepLR').milestones) == [8, 11]


def _check_cascade(cfg, exp):
    """KCR paper 4.4: Cascade Mask R-CNN, 36 epochs, short side 480-800 (max 1333), AdamW 1e-4,
    weight decay 0.05, batch 16; plain OptimWrapper (runs on a CPU; --amp for fp16)."""
    _check_swin_optim(cfg)
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    assert 'constructor' not in cfg.optim_wrapper and not cfg.get('custom_imports')
    assert cfg.train_cfg.max_epochs == 36
    assert list(_scheduler(cfg, 'MultiStepLR').milestones) == [27, 33]
    assert cfg.model.type == 'CascadeRCNN' and len(cfg.model.roi_head.bbox_head) == 3
    pipeline = cfg.train_dataloader.dataset.pipeline
    choice = [t for t in pipeline if t['type'] == 'RandomChoice']
    assert len(choice) == 1
    # every policy ends with a resize to a short side in 480..800, long side <= 1333
    for policy in choice[0]['transforms']:
        scales = policy[-1]['scales']
        assert policy[-1]['type'] == 'RandomChoiceResize' and policy[-1]['keep_ratio']
        assert sorted(min(s) for s in scales) == list(range(480, 801, 32))
        assert {max(s) for s in scales} == {1333}


CHECKS = {
    'ssdlite': _check_ssdlite,
    'mask-rcnn-adamw-cos': _check_mask_rcnn_cos,
    'mask-rcnn-swin': _check_mask_rcnn_swin,
    'cascade-ms-3x': _check_cascade,
}


def test_configs_dump_and_reload(tmp_path):
    """The runner writes the resolved config into its work dir; that file must load back."""
    from mmengine.config import Config
    for name in CONFIGS:
        cfg = _load(name)
        cfg.dump(str(tmp_path / name))
        assert Config.fromfile(str(tmp_path / name)).to_dict() == cfg.to_dict(), name


@pytest.mark.parametrize('name', CONFIGS)
def test_config_settings(name):
    cfg = _load(name)
    exp = EXPECTED[name]
    assert cfg.default_scope == 'mmdet'
    assert cfg.model.type == exp['detector']
    b = cfg.model.backbone
    assert (b.type, b.arch, b.variant) == (f'mmdcs.{exp["backbone"]}', exp['arch'], exp['variant'])
    if exp.get('subnet'):
        assert isinstance(b.subnet, str) and b.subnet.endswith('.json')
    else:
        assert b.get('subnet') is None
    if 'drop_path' in exp:
        assert b.drop_path_rate == exp['drop_path']
    # ImageNet weights through init_cfg (a placeholder path, set with --cfg-options)
    assert b.init_cfg.type == 'Pretrained' and b.init_cfg.prefix == 'backbone.'
    assert isinstance(b.init_cfg.checkpoint, str) and b.init_cfg.checkpoint.endswith('.pth')
    if 'neck' in cfg.model and cfg.model.neck.type == 'FPN':
        assert tuple(cfg.model.neck.in_channels) == exp['channels']
    CHECKS[exp['recipe']](cfg, exp)

    from mmdet.utils import register_all_modules
    from mmengine.registry import HOOKS, DefaultScope
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmdet'):
        for hook in cfg.get('custom_hooks', []):
            hook = dict(hook)
            hook.pop('priority', None)  # the runner's, not the hook's
            HOOKS.build(hook)


# ----------------------------------------------------------------------------- data
def _fake_coco_sample(tmp_path, h=240, w=320):
    import mmcv
    rng = np.random.default_rng(0)
    path = str(tmp_path / 'img.jpg')
    mmcv.imwrite(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), path)
    instances = [
        dict(bbox=[20., 30., 180., 200.], bbox_label=3, ignore_flag=0,
             mask=[[20., 30., 180., 30., 180., 200., 20., 200.]]),
        dict(bbox=[150., 40., 300., 120.], bbox_label=7, ignore_flag=0,
             mask=[[150., 40., 300., 40., 225., 120.]]),
    ]
    return dict(img_path=path, img_id=0, height=h, width=w, instances=instances)


@pytest.mark.parametrize('name', CONFIGS)
def test_data_pipelines(name, tmp_path):
    """The datasets build (annotations not read) and the train / val / test pipelines run on a
    fake sample."""
    from mmdet.registry import DATASETS
    from mmdet.utils import register_all_modules
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    register_all_modules(init_default_scope=False)
    cfg = _load(name)
    sample = _fake_coco_sample(tmp_path)
    with DefaultScope.overwrite_default_scope('mmdet'):
        for split in ('train', 'val', 'test'):
            ds_cfg = cfg[f'{split}_dataloader'].dataset
            dataset = DATASETS.build(dict(ds_cfg, lazy_init=True))
            assert type(dataset).__name__ == 'CocoDataset'
            torch.manual_seed(0)
            np.random.seed(0)
            out = Compose(ds_cfg.pipeline)(dict(sample))
            inputs, data_sample = out['inputs'], out['data_samples']
            assert inputs.shape[0] == 3
            if EXPECTED[name]['recipe'] == 'ssdlite':
                assert tuple(inputs.shape[1:]) == (320, 320)
            elif split != 'train':  # single-scale test: 1333×800
                assert max(inputs.shape[1:]) <= 1333 and min(inputs.shape[1:]) == 800
            if split == 'train':
                assert len(data_sample.gt_instances) >= 1
                if EXPECTED[name]['detector'] != 'SingleStageDetector':
                    assert data_sample.gt_instances.masks.height == inputs.shape[1]


# ----------------------------------------------------------------------------- model
@pytest.fixture(scope='module')
def subnet_file(tmp_path_factory):
    """``subnet_file(cls, arch, variant)``: the JSON of a random-α subnet of that supernet, as the
    search exports it (one per module and supernet)."""
    from mmdcs.selection import arch_parameters
    cache = {}

    def make(cls, arch, variant):
        key = (cls.__name__, arch, variant)
        if key not in cache:
            sup = cls(arch=arch, variant=variant)
            g = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in arch_parameters(sup):
                    p.copy_(torch.randn(p.shape, generator=g))
            path = tmp_path_factory.mktemp('subnet') / f'{arch}-{variant}.json'
            sup.export_subnet(source='test').save(str(path))
            cache[key] = str(path)
        return cache[key]

    return make


def _shrink_proposals(model_cfg):
    """Fewer proposals and sampled RoIs than the recipes: the step tests the wiring, on a CPU
    (the cascade's 4conv1fc heads cost ~30 MMACs per RoI and conv)."""
    train_cfg, test_cfg = model_cfg.get('train_cfg', {}), model_cfg.get('test_cfg', {})
    if 'rpn_proposal' in train_cfg:
        train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=50)
        rcnn = train_cfg.rcnn if isinstance(train_cfg.rcnn, list) else [train_cfg.rcnn]
        for stage in rcnn:
            stage.sampler.num = 32
        test_cfg.rpn.update(nms_pre=200, max_per_img=20)
        test_cfg.rcnn.max_per_img = 10


def _check_pretrained_loading(model, init_cfg, tmp_path):
    """The config's init_cfg loads the backbone from an mmpretrain classifier checkpoint
    (``backbone.*`` keys + a head), as the ImageNet (re)training writes it."""
    import copy
    original = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    state = {f'backbone.{k}': (v + 1 if v.is_floating_point() else v)
             for k, v in model.backbone.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(10, 4)
    path = str(tmp_path / 'classifier.pth')
    torch.save(dict(state_dict=state, meta=dict()), path)
    init_cfg = copy.deepcopy(dict(init_cfg))
    init_cfg['checkpoint'] = path
    model.backbone.init_cfg = init_cfg
    model.backbone.init_weights()
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(v, state[f'backbone.{k}']), k
    model.backbone.load_state_dict(original)


def test_ssd_head_can_predict():
    """mmdet 3.3.0's SSDHead cannot predict: BaseDenseHead reads ``self.loss_cls``, which
    SSDHead never sets (open-mmlab/mmdetection#11780, #11305; fix PR #11524 unmerged). mmdcs
    sets ``SSDHead.loss_cls = None`` (the softmax branch, as before mmdet 3.3) whenever an mmdcs
    backbone is built with mmdet loaded, so SSDLite validation and tools/test.py work."""
    from mmdet.models.dense_heads import SSDHead
    from mmdcs.registry import MODELS
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        MODELS.build(dict(type='mmdcs.MobileViT', arch='mobilevit-xs'))
    assert hasattr(SSDHead, 'loss_cls') and SSDHead.loss_cls is None


@pytest.mark.parametrize('name', CONFIGS)
def test_train_step_and_predict(name, subnet_file, tmp_path):
    from mmdcs.registry import MODELS as MMDCS_MODELS
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmdet.utils import register_all_modules
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    register_all_modules(init_default_scope=False)
    exp = EXPECTED[name]
    cfg = _load(name)
    backbone_cls = MMDCS_MODELS.get(exp['backbone'])
    init_cfg = cfg.model.backbone.init_cfg
    cfg.model.backbone.init_cfg = None
    if exp.get('subnet'):
        cfg.model.backbone.subnet = subnet_file(backbone_cls, exp['arch'], exp['variant'])
    _shrink_proposals(cfg.model)
    ssd = exp['recipe'] == 'ssdlite'
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = revert_sync_batchnorm(MODELS.build(cfg.model))
        backbone = model.backbone
        assert type(backbone) is backbone_cls and backbone.variant == exp['variant']
        assert backbone.is_supernet == (exp['variant'] != 'baseline' and not exp.get('subnet'))
        if exp['arch'] != 'swin-b':  # the same code path; spare writing 350 MB
            _check_pretrained_loading(model, init_cfg, tmp_path)

        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
        if 'paramwise_cfg' in cfg.optim_wrapper:  # Swin: no decay on norms and bias tables
            decay = {id(p): g['weight_decay'] for g in optim_wrapper.optimizer.param_groups
                     for p in g['params']}
            for n, p in backbone.named_parameters():
                if 'relative_position_bias_table' in n or '.norm' in n:
                    assert decay[id(p)] == 0, n
        # SSD's last level is 1×1 and its neck has BatchNorm: two images
        data = demo_mm_inputs(batch_size=2 if ssd else 1,
                              image_shapes=[(3, 320, 320)] * 2 if ssd else [(3, 128, 160)],
                              num_classes=80, with_mask=not ssd)
        if exp['arch'] == 'swin-b':
            # Swin-T's code: spare the CPU the weight gradients and AdamW update of 60 M
            # parameters of the 18-block stage
            backbone.layers[2].blocks[2:].requires_grad_(False)
        model.train()
        if cfg.model.backbone.get('norm_eval'):
            bns = [m for m in backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
            assert bns and not any(m.training for m in bns)
        before = {n: p.detach().clone() for n, p in backbone.named_parameters()
                  if p.requires_grad}
        log_vars = model.train_step(data, optim_wrapper)
        assert torch.isfinite(torch.as_tensor(log_vars['loss']))
        expected_losses = {'loss_cls', 'loss_bbox'} if ssd else {
            'loss_rpn_cls', 'loss_rpn_bbox'}
        assert expected_losses <= {k.split('.')[-1] for k in log_vars}
        if not ssd:
            assert any(k.endswith('loss_mask') for k in log_vars)
        moved = [n for n, p in backbone.named_parameters()
                 if n in before and not torch.equal(p, before[n])]
        assert len(moved) > len(before) // 2

        model.eval()
        with torch.no_grad():
            results = model.test_step(data)
    assert len(results) == len(data['inputs'])
    for r in results:
        assert hasattr(r, 'pred_instances') and r.pred_instances.bboxes.shape[-1] == 4
        if not ssd:
            assert 'masks' in r.pred_instances
