"""The demo downstream configs (configs/demo/*_digits-scenes.py) on a tiny scenes set.

The SSDLite and Semantic-FPN demos train through ``tools/train.py`` with a random-α
DCS-MobileViT-XS subnet (the detector also initialises its backbone from a classifier checkpoint
through its ``init_cfg``, as the demo does), then ``tools/test.py --metrics-out`` evaluates the
checkpoint and writes the real metrics: a few iterations on 12 + 6 scenes of 128x128 per config
(train.py's ``main`` in this process, test.py as a user runs it: two tool processes in all).
The optional Mask R-CNN demo (about 2.5x the SSDLite cost, not part of tools/demo.py) is checked
in-process: its data pipeline yields masks, and its detector takes a training step and predicts
masks."""
import json
import os
import os.path as osp

import pytest
import torch

pytest.importorskip('mmdet')
pytest.importorskip('mmseg')

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DET_CONFIG = 'configs/demo/ssdlite_dcs-mobilevit-xs_digits-scenes.py'
SEG_CONFIG = 'configs/demo/fcn_dcs-mobilevit-xs_digits-scenes.py'
MASK_RCNN_CONFIG = 'configs/demo/mask-rcnn_dcs-mobilevit-xs_digits-scenes.py'
DIGIT_CLASSES = tuple(str(i) for i in range(10))


@pytest.fixture(scope='module')
def subnet_and_checkpoint(tmp_path_factory):
    """A random-α DCS-MobileViT-XS subnet (what tools/export_subnet.py writes) and a classifier
    checkpoint of its pruned backbone (what the demo's retraining writes)."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    from mmdcs.selection import arch_parameters
    root = tmp_path_factory.mktemp('demo_downstream')
    with DefaultScope.overwrite_default_scope('mmdet'):
        torch.manual_seed(0)
        sup = MODELS.build(dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs'))
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for a in arch_parameters(sup):
                a.copy_(torch.randn(a.shape, generator=g) + 1.0)
        subnet = str(root / 'subnet.json')
        sup.export_subnet().save(subnet)
        pruned = MODELS.build(dict(type='mmdcs.MobileViT', arch='mobilevit-xs', subnet=subnet))
    state = {f'backbone.{k}': v for k, v in pruned.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(10, 384)
    state['head.fc.bias'] = torch.zeros(10)
    ckpt = str(root / 'classifier.pth')
    torch.save(dict(state_dict=state, meta=dict()), ckpt)
    with open(subnet) as f:
        blocks = json.load(f)['blocks']
    # the random α really prunes: the demo backbone is a subnet, not the full network
    assert any(b['kept'] < b['dim'] for b in blocks), blocks
    return subnet, ckpt


def _data_options(scenes, det):
    opts = [f'{split}_dataloader.dataset.data_root={scenes}'
            for split in ('train', 'val', 'test')]
    opts += [f'{split}_dataloader.{k}' for split in ('train', 'val', 'test')
             for k in ('num_workers=0', 'persistent_workers=False')]
    opts += [f'{split}_dataloader.batch_size=3' for split in ('train', 'val', 'test')]
    if det:
        ann = osp.join(scenes, 'annotations', 'instances_val.json')
        opts += [f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}']
    return opts


def _check(proc, what):
    assert proc.returncode == 0, (
        f'{what} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')


def _train_and_test(run_tool, capsys, config, work_dir, options, ckpt_name):
    """tools/train.py (its ``main`` in this process) then tools/test.py --metrics-out (a
    process); returns (metrics, train output).

    SSDLite predicts only with mmdcs' patch of mmdet 3.3.0's SSDHead (``SSDHead.loss_cls = None``,
    open-mmlab/mmdetection#11780), which the tools apply: they run unchanged here."""
    from _tools import load_tool
    env = dict(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        load_tool('tools/train.py').main([config, '--work-dir', work_dir, '--no-pin-memory',
                                          '--cfg-options'] + options)
    finally:
        os.chdir(before)
    train_log = capsys.readouterr()
    ckpt = osp.join(work_dir, ckpt_name)
    assert osp.isfile(ckpt), sorted(os.listdir(work_dir))
    metrics_file = osp.join(work_dir, 'metrics.json')
    proc_test = run_tool(['tools/test.py', config, ckpt, '--work-dir', work_dir, '--metrics-out',
                          metrics_file, '--cfg-options'] + options, env=env)
    _check(proc_test, 'tools/test.py')
    with open(metrics_file) as f:
        return json.load(f), train_log.out + train_log.err


def test_configs_parse_with_the_demo_settings():
    """The three configs: the DCS-MobileViT-XS subnet backbone with its Pretrained init, the digits
    classes, 128x128 scenes without flips, and the task's default scope."""
    from mmengine.config import Config
    det = Config.fromfile(osp.join(ROOT, DET_CONFIG))
    seg = Config.fromfile(osp.join(ROOT, SEG_CONFIG))
    mrcnn = Config.fromfile(osp.join(ROOT, MASK_RCNN_CONFIG))
    assert det.default_scope == mrcnn.default_scope == 'mmdet' and seg.default_scope == 'mmseg'
    for cfg in (det, seg, mrcnn):
        bb = cfg.model.backbone
        assert bb.type == 'mmdcs.MobileViT' and bb.arch == 'mobilevit-xs'
        assert bb.subnet == cfg.subnet == 'work_dirs/demo/dcs_subnet/subnet.json'
        assert bb.init_cfg == dict(type='Pretrained', checkpoint=cfg.pretrained,
                                   prefix='backbone.')
        assert cfg.pretrained == 'work_dirs/demo/dcs_retrain/last.pth'
        assert cfg.train_dataloader.dataset.data_root == 'data/digits/scenes'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            types = [t['type'] for t in cfg[loader].dataset.pipeline]
            assert not any('Flip' in t for t in types), (loader, types)
    assert det.model.backbone.out_indices == (2, 3, 4)
    assert tuple(det.train_dataloader.dataset.metainfo['classes']) == DIGIT_CLASSES
    assert det.model.bbox_head.num_classes == 10
    assert det.val_evaluator.type == 'CocoMetric' and det.val_evaluator.metric == 'bbox'
    roi_head = mrcnn.model.roi_head
    assert roi_head.bbox_head.num_classes == roi_head.mask_head.num_classes == 10
    assert mrcnn.val_evaluator.metric == mrcnn.test_evaluator.metric == ['bbox', 'segm']
    for cfg in (det, mrcnn):
        assert cfg.val_evaluator.ann_file == 'data/digits/scenes/annotations/instances_val.json'
    assert tuple(seg.train_dataloader.dataset.metainfo['classes']) == ('background', ) \
        + DIGIT_CLASSES
    assert seg.model.decode_head.num_classes == 11
    assert seg.model.data_preprocessor.size == (128, 128)
    assert seg.val_evaluator == dict(type='IoUMetric', iou_metrics=['mIoU'])

    from mmdcs.datasets.digits import DIGIT_CLASSES as DC, SEG_CLASSES, SEG_PALETTE
    assert DC == DIGIT_CLASSES
    assert tuple(seg.train_dataloader.dataset.metainfo['classes']) == SEG_CLASSES
    assert [list(c) for c in seg.train_dataloader.dataset.metainfo['palette']] == SEG_PALETTE


def test_ssdlite_demo_trains_and_reports_coco_map(tiny_digits, subnet_and_checkpoint, run_tool,
                                                  tmp_path, capsys):
    subnet, ckpt = subnet_and_checkpoint
    scenes = osp.join(tiny_digits, 'scenes')
    options = _data_options(scenes, det=True) + [
        f'model.backbone.subnet={subnet}',
        f'model.backbone.init_cfg.checkpoint={ckpt}',
        # one epoch, no validation (tools/test.py evaluates)
        'train_cfg.max_epochs=1', 'train_cfg.val_begin=100',
        'default_hooks.checkpoint.interval=1', 'default_hooks.logger.interval=1',
    ]
    work_dir = str(tmp_path / 'ssdlite')
    metrics, log = _train_and_test(run_tool, capsys, DET_CONFIG, work_dir, options,
                                   'epoch_1.pth')
    assert ckpt in log  # the backbone was initialised from the classifier checkpoint
    keys = {f'coco/bbox_{k}' for k in ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m', 'mAP_l')}
    assert keys <= set(metrics), sorted(metrics)
    # 4 iterations from an untrained detector: any value in range (-1: no object of that size)
    for k in keys:
        assert -1.0 <= metrics[k] <= 1.0, (k, metrics[k])
    assert 0.0 <= metrics['coco/bbox_mAP'] <= 1.0


def test_segmenter_demo_trains_and_reports_miou(tiny_digits, subnet_and_checkpoint, run_tool,
                                                tmp_path, capsys):
    subnet, _ = subnet_and_checkpoint
    scenes = osp.join(tiny_digits, 'scenes')
    options = _data_options(scenes, det=False) + [
        f'model.backbone.subnet={subnet}', 'model.backbone.init_cfg=None',
        'train_cfg.max_iters=3', 'train_cfg.val_begin=100',
        'default_hooks.checkpoint.interval=3', 'default_hooks.logger.interval=1',
    ]
    work_dir = str(tmp_path / 'seg')
    metrics, _ = _train_and_test(run_tool, capsys, SEG_CONFIG, work_dir, options, 'iter_3.pth')
    assert {'aAcc', 'mIoU'} <= set(metrics), sorted(metrics)
    # mmseg reports percentages
    assert 0.0 <= metrics['mIoU'] <= 100.0
    assert 0.0 < metrics['aAcc'] <= 100.0


def test_mask_rcnn_demo_loads_masks_trains_and_predicts(tiny_digits, subnet_and_checkpoint):
    from mmengine.config import Config
    from mmengine.dataset import pseudo_collate
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    from mmdet.registry import DATASETS, MODELS
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    subnet, _ = subnet_and_checkpoint
    cfg = Config.fromfile(osp.join(ROOT, MASK_RCNN_CONFIG))
    cfg.model.backbone.subnet = subnet
    cfg.model.backbone.init_cfg = None
    ds_cfg = cfg.train_dataloader.dataset
    ds_cfg.data_root = osp.join(tiny_digits, 'scenes')
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmdet'):
        dataset = DATASETS.build(ds_cfg)
        model = MODELS.build(cfg.model)
    model.init_weights()
    assert dataset.metainfo['classes'] == DIGIT_CLASSES
    samples = [dataset[i] for i in range(2)]
    for sample in samples:
        gt = sample['data_samples'].gt_instances
        assert sample['inputs'].shape == (3, 128, 128)
        assert len(gt) > 0 and gt.masks.masks.shape[1:] == (128, 128)
        assert gt.masks.masks.any(axis=(1, 2)).all()  # every digit has stroke pixels
    data = pseudo_collate(samples)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    model.train()
    losses = model.train_step(data, optim_wrapper)
    for k in ('loss_rpn_cls', 'loss_cls', 'loss_bbox', 'loss_mask'):
        assert k in losses and torch.isfinite(losses[k]), (k, losses.get(k))
    model.eval()
    with torch.no_grad():
        pred = model.val_step(data)[0].pred_instances
    assert pred.masks.shape[1:] == (128, 128) and len(pred.masks) == len(pred.labels)
