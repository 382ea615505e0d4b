"""Every segmentation config of ``configs/seg`` at full scale: it parses, its schedule is the
paper's (KCR paper, 4.3), its datasets and train / test / multi-scale-test pipelines build and run on
a fake ADE20K sample, and its segmentor builds (subnet configs from a freshly exported subnet),
takes one training step with the config's optimizer wrapper and predicts.

The step runs on two 64×64 images (the UperNet's 1×1 pyramid pooling has BatchNorm: one image
cannot train), so that each case takes seconds on a CPU."""
import glob
import os.path as osp

import numpy as np
import pytest
import torch
from _mm_batches import seg_batch  # tests/ is on sys.path (the root conftest's directory)

pytest.importorskip('mmseg')

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG_DIR = osp.join(ROOT, 'configs', 'seg')

SWIN_T = dict(arch='swin-t', channels=(96, 192, 384, 768))
SWIN_B = dict(arch='swin-b', channels=(128, 256, 512, 1024))
EXPECTED = {
    'upernet_swin-t_512x512_160k_ade20k.py': dict(SWIN_T, variant='baseline'),
    'upernet_swin-t-kcr_512x512_160k_ade20k.py': dict(SWIN_T, variant='kcr', subnet=True),
    'upernet_swin-t-kcr-supernet_512x512_160k_ade20k.py': dict(SWIN_T, variant='kcr'),
    'upernet_swin-b_512x512_160k_ade20k.py': dict(SWIN_B, variant='baseline'),
    'upernet_swin-b-kcr_512x512_160k_ade20k.py': dict(SWIN_B, variant='kcr', subnet=True),
}
CONFIGS = sorted(EXPECTED)
#: multi-scale test of the Swin protocol: these ratios of the 2048×512 test scale, with flips
TEST_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)


def _load(name):
    from mmengine.config import Config
    return Config.fromfile(osp.join(CONFIG_DIR, name))


def _scheduler(cfg, type_):
    found = [s for s in cfg.param_scheduler if s['type'] == type_]
    assert len(found) == 1, f'{type_} not in {cfg.param_scheduler}'
    return found[0]


def test_every_config_is_listed():
    """A new config must come with its expected settings here."""
    on_disk = sorted(osp.basename(p) for p in glob.glob(osp.join(CONFIG_DIR, '*.py')))
    assert on_disk == CONFIGS


def test_configs_dump_and_reload(tmp_path):
    """The runner writes the resolved config into its work dir; that file must load back."""
    from mmengine.config import Config
    for name in CONFIGS:
        cfg = _load(name)
        cfg.dump(str(tmp_path / name))
        assert Config.fromfile(str(tmp_path / name)).to_dict() == cfg.to_dict(), name


@pytest.mark.parametrize('name', CONFIGS)
def test_config_settings(name):
    """KCR paper, 4.3: UperNet, 160k iterations, batch 16, AdamW 6e-5, wd 0.01, 1,500 warm-up
    iterations then linear decay, drop path 0.2, flip + rescale 0.5-2.0 + photometric distortion,
    multi-scale test 0.5-1.75."""
    cfg = _load(name)
    exp = EXPECTED[name]
    assert cfg.default_scope == 'mmseg'
    m = cfg.model
    assert m.type == 'EncoderDecoder' and m.decode_head.type == 'UPerHead'
    assert m.decode_head.num_classes == m.auxiliary_head.num_classes == 150
    b = m.backbone
    assert (b.type, b.arch, b.variant) == ('mmdcs.Swin', exp['arch'], exp['variant'])
    assert tuple(b.out_indices) == (0, 1, 2, 3)
    assert b.drop_path_rate == 0.2
    if exp.get('subnet'):
        assert isinstance(b.subnet, str) and b.subnet.endswith('.json')
    else:
        assert b.get('subnet') is None
    assert b.init_cfg.type == 'Pretrained' and b.init_cfg.prefix == 'backbone.'
    assert isinstance(b.init_cfg.checkpoint, str) and b.init_cfg.checkpoint.endswith('.pth')
    assert tuple(m.decode_head.in_channels) == exp['channels']
    assert m.auxiliary_head.in_channels == exp['channels'][m.auxiliary_head.in_index] == \
        exp['channels'][2]

    # schedule
    assert cfg.train_cfg.type == 'IterBasedTrainLoop' and cfg.train_cfg.max_iters == 160000
    assert cfg.train_dataloader.batch_size * 8 == 16
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.weight_decay) == ('AdamW', 6e-5, 0.01)
    keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    assert keys['relative_position_bias_table'].decay_mult == 0 == keys['norm'].decay_mult
    warm = _scheduler(cfg, 'LinearLR')
    assert not warm.by_epoch and (warm.begin, warm.end) == (0, 1500)
    poly = _scheduler(cfg, 'PolyLR')
    assert not poly.by_epoch and poly.power == 1.0 and poly.eta_min == 0
    assert (poly.begin, poly.end) == (1500, 160000)

    # augmentation: rescale 0.5-2.0, 512 crop, flip, photometric distortion
    train = {t['type']: t for t in cfg.train_dataloader.dataset.pipeline}
    assert tuple(train['RandomResize']['ratio_range']) == (0.5, 2.0)
    assert tuple(train['RandomCrop']['crop_size']) == (512, 512)
    assert train['RandomFlip']['prob'] == 0.5 and 'PhotoMetricDistortion' in train
    assert tuple(m.data_preprocessor.size) == (512, 512)
    # multi-scale + flip test
    assert cfg.tta_model.type == 'SegTTAModel'
    tta = cfg.tta_pipeline[-1]
    assert tta['type'] == 'TestTimeAug'
    scales = [tuple(t['scale']) for t in tta['transforms'][0]]
    assert scales == [(int(2048 * r), int(512 * r)) for r in TEST_RATIOS]
    assert sorted(t['prob'] for t in tta['transforms'][1]) == [0., 1.]


# ----------------------------------------------------------------------------- data
def _fake_ade_sample(tmp_path, h=100, w=200):
    import mmcv
    rng = np.random.default_rng(0)
    img, seg = str(tmp_path / 'img.jpg'), str(tmp_path / 'seg.png')
    mmcv.imwrite(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), img)
    mmcv.imwrite(rng.integers(0, 151, (h, w), dtype=np.uint8), seg)  # 0 = ignore in ADE20K
    return dict(img_path=img, seg_map_path=seg, reduce_zero_label=True, seg_fields=[])


@pytest.mark.parametrize('name', CONFIGS)
def test_data_pipelines(name, tmp_path):
    """The datasets build (files not listed) and the train / test / multi-scale test pipelines run
    on a fake sample; the multi-scale test gives 6 scales x 2 flips of the 2048×512 scale."""
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    from mmseg.registry import DATASETS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = _load(name)
    sample = _fake_ade_sample(tmp_path)
    with DefaultScope.overwrite_default_scope('mmseg'):
        for split in ('train', 'val', 'test'):
            ds_cfg = cfg[f'{split}_dataloader'].dataset
            dataset = DATASETS.build(dict(ds_cfg, lazy_init=True))
            assert type(dataset).__name__ == 'ADE20KDataset'
            np.random.seed(0)
            out = Compose(ds_cfg.pipeline)(dict(sample))
            inputs, seg = out['inputs'], out['data_samples'].gt_sem_seg.data
            if split == 'train':
                assert tuple(inputs.shape) == (3, 512, 512) == (3, ) + tuple(seg.shape[1:])
            else:  # 100×200 -> short side 512 (test scale 2048×512)
                assert tuple(inputs.shape) == (3, 512, 1024)
            assert seg.max() <= 149 or seg.max() == 255  # labels 1..150 -> 0..149, 0 -> 255
        out = Compose(cfg.tta_pipeline)(dict(sample))
        heights = sorted({int(x.shape[1]) for x in out['inputs']})
        assert len(out['inputs']) == 12
        assert heights == [int(512 * r) for r in TEST_RATIOS]
        flips = [s.flip for s in out['data_samples']]
        assert sorted(flips) == [False] * 6 + [True] * 6


# ----------------------------------------------------------------------------- model
@pytest.fixture(scope='module')
def subnet_file(tmp_path_factory):
    """``subnet_file(arch, variant)``: the JSON of a random-α subnet of that Swin supernet, as the
    search exports it (one per module and supernet)."""
    from mmdcs.models.backbones.swin import Swin
    from mmdcs.selection import arch_parameters
    cache = {}

    def make(arch, variant):
        if (arch, variant) not in cache:
            sup = Swin(arch=arch, variant=variant)
            g = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in arch_parameters(sup):
                    p.copy_(torch.randn(p.shape, generator=g))
            path = tmp_path_factory.mktemp('subnet') / f'{arch}-{variant}.json'
            sup.export_subnet(source='test').save(str(path))
            cache[(arch, variant)] = str(path)
        return cache[(arch, variant)]

    return make


@pytest.mark.parametrize('name', CONFIGS)
def test_train_step_and_predict(name, subnet_file):
    from mmdcs.models.backbones.swin import Swin
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    exp = EXPECTED[name]
    cfg = _load(name)
    cfg.model.backbone.init_cfg = None
    if exp.get('subnet'):
        cfg.model.backbone.subnet = subnet_file(exp['arch'], exp['variant'])
    # 64×64 inputs: the config pads to its 512×512 crop, which would make the step slow
    cfg.model.data_preprocessor.size = (64, 64)
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = revert_sync_batchnorm(MODELS.build(cfg.model))
        backbone = model.backbone
        assert type(backbone) is Swin and backbone.variant == exp['variant']
        assert backbone.is_supernet == (exp['variant'] != 'baseline' and not exp.get('subnet'))
        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
        decay = {id(p): g['weight_decay'] for g in optim_wrapper.optimizer.param_groups
                 for p in g['params']}
        for n, p in backbone.named_parameters():
            if 'relative_position_bias_table' in n or '.norm' in n:
                assert decay[id(p)] == 0, n
        if exp['arch'] == 'swin-b':
            # Swin-T's code: spare the CPU the weight gradients and AdamW update of 60 M
            # parameters of the 18-block stage
            backbone.layers[2].blocks[2:].requires_grad_(False)
        data = seg_batch()
        model.train()
        before = {n: p.detach().clone() for n, p in backbone.named_parameters()
                  if p.requires_grad}
        log_vars = model.train_step(data, optim_wrapper)
        assert torch.isfinite(torch.as_tensor(log_vars['loss']))
        assert {'decode.loss_ce', 'aux.loss_ce'} <= set(log_vars)
        moved = [n for n, p in backbone.named_parameters()
                 if n in before and not torch.equal(p, before[n])]
        assert len(moved) > len(before) // 2

        model.eval()
        with torch.no_grad():
            results = model.test_step(data)
    assert [tuple(r.pred_sem_seg.data.shape) for r in results] == [(1, 64, 64)] * 2
