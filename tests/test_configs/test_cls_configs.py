"""Every ImageNet classification config of ``configs/dcs``, ``configs/kcr`` and
``configs/baselines`` at full scale: it parses, its numbers are the papers' (DCS paper 4.1/A.2,
KCR paper 4.1/A.1, method.md §3-§7), its data settings have the right shape and its pipelines run
(no ImageNet here: a fake JPEG), its model builds (retraining configs from a subnet freshly
exported from the search config's supernet), and a search config takes one architecture step
and one weight step through the search loop's own ``train_step``.

Models run on two 112x112 (64x64 for the step) images; each big model (ViT-B, Swin-B) is built
once per config that names it, and its supernet once in all."""
import copy
import functools
import glob
import os.path as osp
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG_DIR = osp.join(ROOT, 'configs')

# arch -> backbone class and input resolution (256 for MobileViT, 224 otherwise)
ARCHS = {
    'mobilevit-xs': ('MobileViT', 256),
    'mobilevit-s': ('MobileViT', 256),
    'efficientvit-b1': ('EfficientViT', 224),
    'vit-s16': ('ViT', 224),
    'vit-b16': ('ViT', 224),
    'swin-t': ('Swin', 224),
    'swin-b': ('Swin', 224),
}
# method.md §9 (+ DCS paper Table 1's DCS-ViT-S/16 and DCS-Swin-T)
SEARCHED = [('dcs', 'mobilevit-xs'), ('dcs', 'mobilevit-s'), ('dcs', 'efficientvit-b1'),
            ('dcs', 'vit-s16'), ('dcs', 'swin-t'), ('kcr', 'vit-s16'), ('kcr', 'vit-b16'),
            ('kcr', 'swin-t'), ('kcr', 'swin-b')]
SEARCH = {f'{m}/{m}-{a}_search_in100.py': (m, a) for m, a in SEARCHED}
RETRAIN = {f'{m}/{m}-{a}_retrain_in1k.py': (m, a) for m, a in SEARCHED}
BASELINES = {f'baselines/{a}_in1k.py': ('baseline', a) for a in ARCHS}
ALL = {**SEARCH, **RETRAIN, **BASELINES}

IMAGENET_MEAN = [123.675, 116.28, 103.53]
IMAGENET_STD = [58.395, 57.12, 57.375]

pytestmark = pytest.mark.xdist_group('cls_configs')  # one worker: the subnet files are shared


@functools.lru_cache(maxsize=None)
def _parse(name):
    from mmengine.config import Config
    return Config.fromfile(osp.join(CONFIG_DIR, name))


def _load(name):
    """The config (parsed once per session; a copy, so a test may change it)."""
    return copy.deepcopy(_parse(name))


def test_every_config_is_listed():
    """A new config must come with its expected settings here."""
    on_disk = sorted(
        osp.relpath(p, CONFIG_DIR) for d in ('dcs', 'kcr', 'baselines')
        for p in glob.glob(osp.join(CONFIG_DIR, d, '*.py')))
    assert on_disk == sorted(ALL)


# ----------------------------------------------------------------------------- settings
def _check_data(cfg, arch, search):
    """Resolution, normalisation, batch 64 x 8 GPUs = 512, dataset paths (shape only)."""
    res = ARCHS[arch][1]
    pre = cfg.data_preprocessor
    if res == 256:  # MobileViT: RGB in [0, 1], as its weights and the SSDLite configs
        assert (list(pre.mean), list(pre.std), pre.to_rgb) == ([0.] * 3, [255.] * 3, True)
    else:
        assert (list(pre.mean), list(pre.std), pre.to_rgb) == (IMAGENET_MEAN, IMAGENET_STD, True)
    num_classes = 100 if search else 1000
    assert pre.num_classes == num_classes == cfg.model.head.num_classes

    train = cfg.train_dataloader.dataset.pipeline
    assert [t['type'] for t in train] == ['LoadImageFromFile', 'RandomResizedCrop', 'RandomFlip',
                                         'PackInputs']  # the papers' augmentation, no more
    assert train[1].scale == res and train[2].prob == 0.5
    for loader in ('val_dataloader', 'test_dataloader'):
        test = cfg[loader].dataset.pipeline
        assert [t['type'] for t in test] == ['LoadImageFromFile', 'ResizeEdge', 'CenterCrop',
                                            'PackInputs']
        assert (test[1].scale, test[2].crop_size) == ({224: 256, 256: 288}[res], res)

    assert cfg.train_dataloader.batch_size * 8 == cfg.auto_scale_lr.base_batch_size == 512
    assert cfg.train_dataloader.sampler.shuffle and not cfg.val_dataloader.sampler.shuffle
    for loader, split in (('train_dataloader', 'train'), ('val_dataloader', 'val'),
                          ('test_dataloader', 'val')):
        ds = cfg[loader].dataset
        if search:  # the subset's annotation files, ImageNet's images (paths from the cwd)
            assert ds.type == 'CustomDataset' and ds.get('data_root') is None
            assert ds.ann_file == f'data/imagenet100/meta/{split}.txt'
            assert ds.data_prefix == f'data/imagenet/{split}'
            assert ds.classes == 'data/imagenet100/classes.txt'
        else:
            assert (ds.type, ds.data_root, ds.split) == ('ImageNet', 'data/imagenet', split)
    assert list(cfg.val_evaluator.topk) == [1, 5]


def _check_backbone(cfg, method, arch):
    b = cfg.model.backbone
    variant = 'baseline' if method == 'baseline' else method
    assert (b.type, b.arch, b.variant) == (f'mmdcs.{ARCHS[arch][0]}', arch, variant)
    assert 'gate_init' not in b and 'tau' not in b  # the defaults: 3.0 (all open), 4.5


def _check_retrain_schedule(cfg):
    """300 epochs, AdamW (0.9, 0.999) wd 0.01, lr 2e-4 -> 2e-3 over 5 epochs, cosine to 2e-4."""
    assert cfg.train_cfg == dict(by_epoch=True, max_epochs=300, val_interval=1)
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, tuple(opt.betas), opt.weight_decay) == ('AdamW', 2e-3, (0.9, 0.999),
                                                                     0.01)
    warm, cos = cfg.param_scheduler
    assert (warm.type, warm.by_epoch, warm.begin, warm.end) == ('LinearLR', True, 0, 5)
    assert (warm.start_factor, warm.end_factor) == (0.1, 1.0)
    assert opt.lr * warm.start_factor == pytest.approx(2e-4)
    assert (cos.type, cos.by_epoch, cos.begin, cos.end) == ('CosineAnnealingLR', True, 5, 300)
    assert (cos.T_max, cos.eta_min) == (295, 2e-4)
    assert warm.convert_to_iter_based and cos.convert_to_iter_based
    assert cfg.custom_hooks[-1] == dict(type='EMAHook', momentum=2e-4, priority='ABOVE_NORMAL')


@pytest.mark.parametrize('name', sorted(SEARCH))
def test_search_settings(name):
    """DCS paper 4.1 / KCR paper 4.1: 200 epochs, 70/30, AdamW (0.9, 0.999) 1e-3 -> 1e-4 cosine,
    τ0 = 4.5 x 0.95 per epoch, λ = 0.2 (paper cost)."""
    method, arch = SEARCH[name]
    cfg = _load(name)
    assert cfg.default_scope == 'mmpretrain'
    tc = cfg.train_cfg
    assert (tc.type, tc.max_epochs, tc.arch_ratio, tc.split_seed) == (
        'mmdcs.AlternatingSearchLoop', 200, 0.3, 0)
    ow = cfg.optim_wrapper
    assert ow.constructor == 'mmdcs.SearchOptimWrapperConstructor'
    w, a = ow.weight.optimizer, ow.arch.optimizer
    assert (w.type, w.lr, tuple(w.betas), w.weight_decay) == ('AdamW', 1e-3, (0.9, 0.999), 0.01)
    assert (a.type, a.lr, tuple(a.betas), a.weight_decay) == ('AdamW', 1e-3, (0.9, 0.999), 0.)
    for kind in ('weight', 'arch'):
        [s] = cfg.param_scheduler[kind]
        assert (s.type, s.by_epoch, s.begin, s.end, s.T_max, s.eta_min) == (
            'CosineAnnealingLR', True, 0, 200, 200, 1e-4)
        assert not s.get('convert_to_iter_based', False)
    assert cfg.custom_hooks == [
        dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch')]
    model = cfg.model
    assert model.type == 'mmdcs.ChannelSelectionClassifier'
    assert model.cost == dict(mode='paper', weight=0.2)
    assert 'regularizer' not in model and model.backbone.get('subnet') is None
    _check_backbone(cfg, method, arch)
    _check_data(cfg, arch, search=True)
    # the export command of the header writes the subnet where the retraining reads it
    with open(osp.join(CONFIG_DIR, name)) as f:
        assert f'--out work_dirs/{method}-{arch}_search_in100\n' in f.read()


@pytest.mark.parametrize('name', sorted(RETRAIN))
def test_retrain_settings(name):
    """DCS paper A.2 / KCR paper A.1 + method.md §4-§7: the retrain schedule, t_warm = 90, IB η = 50
    (DCS) or KCR η = 1, γ = 0.1; τ hook for DCS subnets only; EMA."""
    method, arch = RETRAIN[name]
    cfg = _load(name)
    _check_retrain_schedule(cfg)
    model = cfg.model
    assert model.type == 'mmdcs.ChannelSelectionClassifier' and 'cost' not in model
    if method == 'dcs':
        assert model.regularizer == dict(type='ib', eta=50., t_warm=90, s=1.)
        assert cfg.custom_hooks[:2] == [
            dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch'),
            dict(type='mmdcs.RegularizerHook')]
    else:
        assert model.regularizer == dict(type='kcr', eta=1., t_warm=90, gamma=0.1,
                                         route='exact')
        assert cfg.custom_hooks[:1] == [dict(type='mmdcs.RegularizerHook')]
    assert len(cfg.custom_hooks) == {'dcs': 3, 'kcr': 2}[method]
    assert cfg.subnet == f'work_dirs/{method}-{arch}_search_in100/subnet.json'
    assert model.backbone.subnet == cfg.subnet
    _check_backbone(cfg, method, arch)
    _check_data(cfg, arch, search=False)


@pytest.mark.parametrize('name', sorted(BASELINES))
def test_baseline_settings(name):
    """The retrain recipe without the method: no regularizer, no hook but EMA."""
    _, arch = BASELINES[name]
    cfg = _load(name)
    _check_retrain_schedule(cfg)
    assert cfg.model.type == 'ImageClassifier'
    assert 'regularizer' not in cfg.model and 'cost' not in cfg.model
    assert len(cfg.custom_hooks) == 1
    _check_backbone(cfg, 'baseline', arch)
    _check_data(cfg, arch, search=False)


def test_shared_recipes_agree():
    """The 256 block is written twice (search and ImageNet-1k bases): the same; the retraining
    of every searched model uses the same data as its baseline."""
    search = _load('dcs/dcs-mobilevit-xs_search_in100.py')
    retrain = _load('dcs/dcs-mobilevit-xs_retrain_in1k.py')
    for key in ('train_dataloader', 'val_dataloader'):
        assert search[key].dataset.pipeline == retrain[key].dataset.pipeline
    assert dict(search.data_preprocessor, num_classes=0) == dict(retrain.data_preprocessor,
                                                                num_classes=0)
    for name, (_, arch) in RETRAIN.items():
        a, b = _load(name), _load(f'baselines/{arch}_in1k.py')
        for key in ('train_dataloader', 'val_dataloader', 'data_preprocessor',
                    'optim_wrapper', 'param_scheduler', 'train_cfg', 'auto_scale_lr'):
            assert a[key] == b[key], (name, key)


@pytest.mark.parametrize('name', sorted(ALL))
def test_pipelines_and_hooks_build(name, tmp_path):
    """The train / val / test pipelines run on a fake JPEG (not square, smaller than the crop
    on one side); the custom hooks build."""
    import mmcv
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import HOOKS
    from mmpretrain.utils import register_all_modules

    import mmdcs.engine  # noqa: F401
    register_all_modules(init_default_scope=False)
    cfg = _load(name)
    res = ARCHS[ALL[name][1]][1]
    path = str(tmp_path / 'img.JPEG')
    mmcv.imwrite(np.random.default_rng(0).integers(0, 256, (200, 330, 3), dtype=np.uint8), path)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            torch.manual_seed(0)
            out = Compose(cfg[loader].dataset.pipeline)(dict(img_path=path, gt_label=3))
            assert tuple(out['inputs'].shape) == (3, res, res)
            assert int(out['data_samples'].gt_label) == 3
        for hook in cfg.custom_hooks:
            hook = dict(hook)
            hook.pop('priority', None)  # the runner's, not the hook's
            HOOKS.build(hook)


# ----------------------------------------------------------------------------- models
def _build(cfg):
    """The model as the runner builds it (the config's data_preprocessor)."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules

    import mmdcs.models  # noqa: F401
    register_all_modules(init_default_scope=False)
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(dict(cfg.model, data_preprocessor=cfg.data_preprocessor))


def _optim_wrapper(model, cfg):
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return build_optim_wrapper(model, cfg.optim_wrapper)


def _check_no_decay(model, optimizer):
    """weight decay 0.01 on weight matrices, none on norms, biases and embeddings."""
    decay = {id(p): g['weight_decay'] for g in optimizer.param_groups for p in g['params']}
    for n, p in model.named_parameters():
        if id(p) not in decay:
            continue
        flat = p.ndim == 1 or any(k in n for k in ('pos_embed', 'cls_token', 'bias_table'))
        assert decay[id(p)] == (0. if flat else 0.01), n


def _batch(n=2, size=112, num_classes=1000):
    from mmpretrain.structures import DataSample
    g = torch.Generator().manual_seed(0)
    return dict(
        inputs=[torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
                for _ in range(n)],
        data_samples=[DataSample().set_gt_label(k * 7 % num_classes) for k in range(n)])


@pytest.fixture(scope='module')
def subnet_file(tmp_path_factory):
    """``subnet_file(method, arch)``: a subnet of the search config's supernet with random α
    (about half of the channels kept), saved as the search exports it; built once per supernet
    (the search test of that config fills the cache)."""
    from mmdcs.selection import arch_parameters
    cache = {}

    def export(model, method, arch):
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in arch_parameters(model.backbone):
                p.copy_(torch.randn(p.shape, generator=g))
        path = tmp_path_factory.mktemp('subnet') / f'{method}-{arch}.json'
        model.backbone.export_subnet(source='test').save(str(path))
        cache[(method, arch)] = str(path)

    def get(method, arch, model=None):
        if (method, arch) not in cache:
            if model is None:
                model = _build(_load(f'{method}/{method}-{arch}_search_in100.py'))
            export(model, method, arch)
        return cache[(method, arch)]

    return get


@pytest.mark.parametrize('name', sorted(SEARCH))
def test_search_model_builds(name, subnet_file):
    """A supernet with every gate open (α = 3.0), a finite cost term, and the two optimizers of
    the config: α in the architecture one only."""
    from mmdcs.selection import DEFAULT_GATE_INIT, gates
    method, arch = SEARCH[name]
    cfg = _load(name)
    model = _build(cfg)
    b = model.backbone
    assert type(b).__name__ == ARCHS[arch][0] and b.variant == method and b.is_supernet
    alphas = model.arch_parameters()
    assert alphas and DEFAULT_GATE_INIT == 3.0
    assert all(bool((a == 3.0).all()) for a in alphas)
    # DCS: a gate per α and per Q/K selector (Linear_θ); KCR: the α gates only
    n_gates = sum(1 for _ in gates(b))
    assert n_gates > len(alphas) if method == 'dcs' else n_gates == len(alphas)
    assert model.head.num_classes == 100
    assert model.cost_cfg == dict(mode='paper', weight=0.2, entropy_weight=0.,
                                  expectation='gate', target=None)
    terms = model.search_terms()
    assert torch.isfinite(terms['loss_cost']) and terms['cost'] > 0

    ow = _optim_wrapper(model, cfg)
    assert set(ow.keys()) == {'weight', 'arch'}
    in_arch = {id(p) for g in ow['arch'].optimizer.param_groups for p in g['params']}
    in_weight = {id(p) for g in ow['weight'].optimizer.param_groups for p in g['params']}
    assert in_arch == {id(a) for a in alphas}
    assert in_weight == {id(p) for p in model.parameters()} - in_arch
    _check_no_decay(model, ow['weight'].optimizer)
    subnet_file(method, arch, model)  # export this supernet's subnet for the retrain test


def test_search_step():
    """One architecture step and one weight step of DCS-MobileViT-XS through
    ``AlternatingSearchLoop.train_step`` with the config's optimizers: each moves its own
    parameters only; the architecture step's loss has the cost term."""
    from mmdcs.engine import AlternatingSearchLoop
    cfg = _load('dcs/dcs-mobilevit-xs_search_in100.py')
    model = _build(cfg)
    ow = _optim_wrapper(model, cfg)
    loop = SimpleNamespace(runner=SimpleNamespace(model=model, optim_wrapper=ow), model=model)
    alphas = {id(a) for a in model.arch_parameters()}
    model.train()

    def snapshot():
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    def moved(before):
        after = dict(model.named_parameters())
        arch = [n for n in before if id(after[n]) in alphas]
        weight = [n for n in before if id(after[n]) not in alphas]
        return ({n for n in arch if not torch.equal(before[n], after[n])},
                {n for n in weight if not torch.equal(before[n], after[n])}, arch, weight)

    before = snapshot()
    log = AlternatingSearchLoop.train_step(loop, _batch(size=64, num_classes=100), 'arch')
    assert {'arch_loss', 'arch_loss_cost', 'arch_cost'} <= set(log)
    assert np.isfinite(float(log['arch_loss'])) and float(log['arch_cost']) > 0
    arch_moved, weight_moved, arch, _ = moved(before)
    assert arch_moved == set(arch) and not weight_moved
    assert model.step_kind is None

    before = snapshot()
    log = AlternatingSearchLoop.train_step(loop, _batch(size=64, num_classes=100), 'weight')
    assert 'loss_cost' not in log and np.isfinite(float(log['loss']))
    arch_moved, weight_moved, _, weight = moved(before)
    assert not arch_moved and len(weight_moved) > len(weight) // 2


@pytest.mark.parametrize('name', sorted(RETRAIN))
def test_retrain_model_builds(name, subnet_file):
    """The subnet builds from the exported file alone; DCS subnets keep their Q/K gates, KCR
    subnets have none; the regularizer takes the pre-logit features (training step before
    t_warm: the cross-entropy, and the streaming statistics of the IB / KCR term)."""
    from mmdcs.selection import gates
    method, arch = RETRAIN[name]
    cfg = _load(name)
    cfg.model.backbone.subnet = subnet_file(method, arch)
    model = _build(cfg)
    b = model.backbone
    assert type(b).__name__ == ARCHS[arch][0] and b.variant == method
    assert not b.is_supernet and b.subnet_spec is not None and not model.arch_parameters()
    assert (sum(1 for _ in gates(model)) > 0) == (method == 'dcs')
    assert model.reg_cfg == dict(type={'dcs': 'ib', 'kcr': 'kcr'}[method],
                                 eta={'dcs': 50., 'kcr': 1.}[method], t_warm=90,
                                 ramp=1.0)  # mmdcs's ramp of η (method.md §4.3)
    assert model.regularizer.normalize  # the term on unit features (method.md §6.8, §7.5)
    _check_no_decay(model, _optim_wrapper(model, cfg).optimizer)

    model.train()
    data = model.data_preprocessor(_batch(), True)
    with torch.no_grad():
        losses = model(**data, mode='loss')
    assert set(losses) == {'loss'} and torch.isfinite(losses['loss'])
    assert not model.reg_active  # switched on by RegularizerHook at t_warm


@pytest.mark.parametrize('name', sorted(BASELINES))
def test_baseline_model_builds(name):
    from mmdcs.selection import gates
    _, arch = BASELINES[name]
    cfg = _load(name)
    model = _build(cfg)
    assert type(model).__name__ == 'ImageClassifier'
    assert type(model.backbone).__name__ == ARCHS[arch][0]
    assert model.backbone.variant == 'baseline' and not any(True for _ in gates(model))
    model.eval()
    data = model.data_preprocessor(_batch(), False)
    with torch.no_grad():
        logits = model(data['inputs'], mode='tensor')
    assert logits.shape == (2, 1000) and torch.isfinite(logits).all()
