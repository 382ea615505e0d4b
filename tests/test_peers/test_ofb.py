"""Once-for-Both (OFB): bi-mask, losses, compression with optimizer state, fusion, PMIM, export,
arch files, the demo config, the ImageNet configs and a resumed search."""
import copy
import glob
import json
import math
import os.path as osp

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmdcs.analysis.complexity import count_flops
from mmdcs.peers.ofb import (BiMask, PMIMDecoder, adaptive_one_hot_loss, flops_loss,
                             linear_schedule, local_norm_targets, pmim_loss, random_patch_mask,
                             score_norm, slice_param_, upsample_patch_mask)
from mmdcs.peers.ofb.arch import ArchFileError
from mmdcs.registry import MODELS
from _tools import assert_close_scaled, load_tool  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SEARCH_CFG = osp.join(ROOT, 'configs/demo/ofb-deit-tiny_search_digits.py')
FINETUNE_CFG = osp.join(ROOT, 'configs/demo/ofb-deit-tiny_finetune_digits.py')


def _build(cfg):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def _classifier(search=dict(target_ratio=0.5), img_size=32, **backbone):
    return _build(dict(
        type='mmdcs.OFBClassifier',
        backbone=dict(type='mmdcs.OFBViT', arch='deit-tiny', img_size=img_size, **backbone),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                  loss=dict(type='CrossEntropyLoss')),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
        search=search))


def _spread_alpha(model, seed=0, scale=3.):
    """Random, well separated α (so that a compression drops cells everywhere) and
    w_p = 0.5 (both parts of the bi-mask matter)."""
    g = torch.Generator().manual_seed(seed)
    for _, _, bm in model.backbone.named_bimasks():
        bm.alpha.data = torch.randn(bm.alpha.shape, generator=g) * scale
        bm.score.data = torch.randn(bm.score.shape, generator=g)
        bm.w_p.fill_(0.5)


def _favour_small(bm):
    """α that makes the largest cells of ``bm`` negligible (they are dropped)."""
    a = torch.linspace(2., -6., bm.alpha.numel()).view(-1)
    if bm.alpha.dim() == 2:
        h, d = bm.alpha.shape
        a = (torch.linspace(1., -4., h)[:, None] + torch.linspace(1., -4., d)[None, :])
    bm.alpha.data = a.view_as(bm.alpha).clone()


def _logits(model, x):
    model.eval()
    with torch.no_grad():
        return model(x, mode='tensor')


# ----------------------------------------------------------------------------- bi-mask
def test_bimask_sorts_by_importance_and_mixes_cells():
    bm = BiMask((6, ), ([2, 4, 6], ))
    bm.score.data = torch.tensor([0.1, 2., -1., 0.5, 3., -2.])  # ranks: 3 1 4 2 0 5
    bm.alpha.data = torch.tensor([0., math.log(3.), 0.])          # p = 0.2 0.6 0.2
    bm.w_p.fill_(0.)
    p = torch.tensor([.2, .6, .2])
    # V by rank: ranks 0-1 in every cell, 2-3 in the two larger, 4-5 in the largest
    v_rank = torch.tensor([1., 1., .8, .8, .2, .2])
    expected = v_rank[torch.tensor([3, 1, 4, 2, 0, 5])]
    assert torch.allclose(bm.probs(), p)
    assert torch.allclose(bm(), expected)
    bm.w_p.fill_(.3)
    assert torch.allclose(bm(), .7 * expected + .3 * torch.sigmoid(bm.score))
    # the largest cell dropped: units ranked ≥ 4 leave the support (0 in the mask)
    bm.active[2] = False
    m = bm()
    assert torch.equal(m == 0, torch.tensor([False, False, True, False, False, True]))
    assert bm.keep_index().tolist() == [0, 1, 3, 4]


def test_bimask_attention_ranks_heads_then_channels():
    bm = BiMask((3, 4), ([2, 3], [2, 4]))
    bm.score.data = torch.tensor([[0., 1., 2., 3.], [9., 9., 9., 9.], [-9., -9., -9., -9.]])
    bm.w_p.fill_(0.)
    bm.active.fill_(False)
    bm.active[0, 0] = True                     # 2 heads x 2 channels: one cell, p = 1
    m = bm()
    assert m[2].sum() == 0                     # the least important head is out
    assert torch.equal(m[0], torch.tensor([0., 0., 1., 1.]))  # its best two channels
    assert m[1].sum() == 2
    heads, dims = bm.keep_index()
    assert heads.tolist() == [0, 1] and dims[0].tolist() == [2, 3]
    assert float(bm.expected_size().detach()) == 4.


def test_drop_cells_rule_and_bad_threshold():
    bm = BiMask((8, ), ([2, 4, 6, 8], ))
    bm.alpha.data = torch.log(torch.tensor([.04, .16, .3, .5]))
    assert bm.drop_cells(0.2)                  # p ≤ 0.2 / 4 = 0.05: only the first
    assert bm.active.tolist() == [False, True, True, True]
    assert not bm.drop_cells(0.2)              # renormalised: .17 .31 .52 > 0.2 / 3
    with pytest.raises(ValueError, match='threshold'):
        bm.drop_cells(1.5)
    with pytest.raises(ValueError, match='ascending'):
        BiMask((8, ), ([4, 2, 8], ))


# ----------------------------------------------------------------------------- losses
def test_adaptive_one_hot_loss_by_hand():
    p = torch.tensor([.5, .3, .2])
    entropy = -(.5 * math.log(.5) + .3 * math.log(.3) + .2 * math.log(.2))
    omega = sum((v - 1 / 3)**2 for v in (.5, .3, .2)) / (1 - 1 / 3)
    expected = entropy + math.tan(math.pi / 2 - math.pi * omega) / 3
    assert float(adaptive_one_hot_loss(p)) == pytest.approx(expected, rel=1e-5)
    assert float(adaptive_one_hot_loss(p, use_variance=False)) == pytest.approx(entropy)
    assert float(adaptive_one_hot_loss(torch.tensor([1.]))) == 0.
    # the variance term decreases towards a one-hot p (its gradient is the steep tangent)
    near = adaptive_one_hot_loss(torch.tensor([.98, .01, .01]), use_entropy=False)
    assert float(near) < 0 < float(adaptive_one_hot_loss(p, use_entropy=False))
    s = torch.tensor([0., 1., -1.])
    assert float(score_norm(s, 4e-4)) == pytest.approx(4e-4 * float(torch.sigmoid(s).sum()))


def test_flops_loss_is_zero_at_target_and_differentiable_in_alpha():
    model = _classifier()
    searched = model.expected_macs()
    full = model.full_macs()
    assert float(flops_loss(searched.detach(), float(searched.detach()), full)) == 0.
    loss = flops_loss(searched, 0.3 * full, full)
    assert float(loss.detach()) == pytest.approx(
        ((float(searched.detach()) - 0.3 * full) / full)**2, rel=1e-5)
    loss.backward()
    grads = [bm.alpha.grad for _, _, bm in model.backbone.named_bimasks()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    # the search terms of the classifier: one per kind, with the weights of the config
    terms = model.search_terms()
    assert {'loss_attn', 'loss_mlp', 'loss_embed', 'loss_flops', 'loss_score_norm',
            'gflops'} <= set(terms)
    # a smaller search space: only the MLP widths
    mlp_only = _classifier(search_space=('mlp', ))
    assert {k for k, _, _ in mlp_only.backbone.named_bimasks()} == {'mlp'}
    terms = mlp_only.search_terms()
    assert 'loss_mlp' in terms and not {'loss_attn', 'loss_embed'} & set(terms)
    with pytest.raises(ValueError, match="unknown search_space entries \\['heads'\\]"):
        _classifier(search_space=('heads', ))


def test_expected_flops_equal_the_counted_flops_of_the_compact_model():
    model = _classifier()
    full = _classifier(search=None, search_space=())
    assert model.full_macs() == count_flops(full.eval(), (32, 32))
    _spread_alpha(model)
    model.finalize()                           # one cell per group, sliced
    model.fuse()
    arch = model.backbone.export_arch()
    compact = _classifier(search=None, arch_file=arch)
    assert float(model.expected_macs()) == count_flops(compact.eval(), (32, 32))


# ----------------------------------------------------------------------------- compression
def test_compress_is_exact_and_slices_the_optimizer_state():
    torch.manual_seed(0)
    model = _classifier()
    _spread_alpha(model)
    bb = model.backbone
    _favour_small(bb.embed_bimask)
    _favour_small(bb.blocks[0].attn.bimask)
    _favour_small(bb.blocks[1].mlp.bimask)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    x = torch.randn(2, 3, 32, 32)
    sum(v for k, v in model.loss(x, _samples(2)).items() if 'loss' in k).backward()
    opt.step()
    model.eval()
    reference = copy.deepcopy(model)
    for _, _, bm in reference.backbone.named_bimasks():
        bm.drop_cells(0.2)                     # the same drops, without slicing
    qkv = bb.blocks[0].attn.qkv.weight
    before = dict(w=qkv.detach().clone(), m=opt.state[qkv]['exp_avg'].clone(),
                  v=opt.state[qkv]['exp_avg_sq'].clone())
    heads, dims = reference.backbone.blocks[0].attn.bimask.keep_index()
    report = model.compress(0.2, opt)
    assert report['changed'] and report['out_keep'] is not None
    assert bb.embed_dim < 192 and model.head.fc.weight.shape[1] == bb.embed_dim
    assert model.decoder.conv.weight.shape[1] == bb.embed_dim
    assert bb.blocks[0].attn.head_dim < 64 and bb.blocks[1].mlp.hidden < 768
    y_ref, y = _logits(reference, x), _logits(model, x)
    assert_close_scaled(y, y_ref, 1e-5)
    # the kept rows of q/k/v and their Adam moments are the same entries as before (the
    # embedding columns were sliced too)
    emb = report['out_keep']
    units = (heads[:, None] * 64 + dims).flatten()
    rows = torch.cat([s * 192 + units for s in range(3)])
    for key, new in (('w', qkv.detach()), ('m', opt.state[qkv]['exp_avg']),
                     ('v', opt.state[qkv]['exp_avg_sq'])):
        assert torch.equal(new, before[key][rows][:, emb]), key
    # training goes on with the same optimizer
    model.train()
    sum(v for k, v in model.loss(x, _samples(2)).items() if 'loss' in k).backward()
    opt.step()


def test_slice_param_keeps_identity_and_moments():
    lin = nn.Linear(4, 6)
    opt = torch.optim.AdamW(lin.parameters(), lr=.1)
    lin(torch.randn(3, 4)).pow(2).sum().backward()
    opt.step()
    w = lin.weight
    old = {k: v.clone() for k, v in opt.state[w].items()}
    idx = torch.tensor([5, 0, 2])
    slice_param_(w, idx, 0, opt)
    assert w is lin.weight and w.shape == (3, 4)
    assert torch.equal(opt.state[w]['exp_avg'], old['exp_avg'][idx])
    assert torch.equal(opt.state[w]['exp_avg_sq'], old['exp_avg_sq'][idx])
    assert torch.equal(opt.state[w]['step'], old['step'])


def test_finish_fuse_export_rebuild_give_the_masked_supernet(tmp_path):
    model = _classifier()
    _spread_alpha(model, seed=1)
    x = torch.randn(2, 3, 32, 32)
    model.finalize()
    assert model.backbone.search_finished and bool(model.search_done)
    assert not model.search_terms().keys() & {'loss_attn', 'loss_mlp', 'loss_embed'}
    model.train()
    losses = model.loss(x, _samples(2))       # CE alone; the search terms logged as 0
    assert float(losses['loss_attn']) == 0 and float(losses['loss_pmim']) == 0
    assert float(losses['loss_ce'].detach()) > 0
    y_masked = _logits(model, x)
    model.fuse()
    assert_close_scaled(_logits(model, x), y_masked, 1e-5)
    path = str(tmp_path / 'arch.json')
    from mmdcs.peers.ofb.arch import save_arch
    save_arch(model.backbone.export_arch(source='test'), path)
    compact = _classifier(search=None, arch_file=path)
    state = {f'backbone.{k}': v for k, v in model.backbone.compact_state_dict().items()}
    state.update({k: v for k, v in model.state_dict().items()
                  if k.startswith('head.')})
    missing, unexpected = compact.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {'keep_ratio', 'search_done'}
    assert not any('bimask' in n for n, _ in compact.named_parameters())
    assert_close_scaled(_logits(compact, x), y_masked, 1e-5)
    # the analysis tools take the compact classifier like the DCS / KCR ones
    from mmdcs.analysis.latency import time_models
    timing = time_models(dict(compact=compact, full=_classifier(search=None, search_space=())),
                         x, warmup=0, repeats=1)
    assert timing['compact']['median_ms'] > 0 and timing['full']['batch'] == 2


# ----------------------------------------------------------------------------- PMIM
def test_pmim_loss_counts_masked_pixels_only():
    g = torch.Generator().manual_seed(0)
    mask = random_patch_mask(3, 16, 0.75, generator=g)
    assert mask.sum(1).tolist() == [4., 4., 4.]
    images = torch.randn(3, 3, 64, 64, generator=g)
    pixel = upsample_patch_mask(mask, (4, 4), 16)
    assert pixel.shape == (3, 1, 64, 64) and float(pixel.sum()) == 3 * 4 * 256
    target = local_norm_targets(images, 47)
    wrong_where_visible = target + 5. * (1 - pixel)
    assert float(pmim_loss(wrong_where_visible, images, pixel)) == pytest.approx(0., abs=1e-6)
    off = target + 2. * pixel                  # every masked pixel off by 2
    assert float(pmim_loss(off, images, pixel)) == pytest.approx(2., rel=1e-4)
    dec = PMIMDecoder(8, 16)
    assert dec(torch.randn(2, 8, 4, 4)).shape == (2, 3, 64, 64)
    assert linear_schedule(10, 20, .95, .75) == pytest.approx(.85)
    assert linear_schedule(30, 20, .95, .75) == pytest.approx(.75)


# ----------------------------------------------------------------------------- arch files
def test_bad_arch_files_raise_clear_errors(tmp_path):
    good = dict(format='mmdcs-ofb-arch/1', family='vit', arch='deit-tiny', embed_dim=96,
                blocks=[dict(num_heads=2, head_dim=32, mlp_hidden=384)] * 12)
    _classifier(search=None, arch_file=good)   # builds
    cases = [
        (dict(good, family='swin'), "family 'swin'"),
        (dict(good, arch='deit-s'), "searched on 'deit-s'"),
        (dict(good, blocks=good['blocks'][:11]), '11 blocks'),
        (dict(good, embed_dim=400), 'embed_dim = 400 exceeds'),
        (dict(good, blocks=[dict(num_heads=4, head_dim=32, mlp_hidden=384)] + good['blocks'][1:]),
         'block 0: num_heads = 4 exceeds'),
        (dict(good, blocks=good['blocks'][:5] + [dict(num_heads=2, head_dim=32)]
              + good['blocks'][6:]), 'block 5: missing mlp_hidden'),
        (dict(good, blocks=[dict(num_heads=2, head_dim=0, mlp_hidden=384)] * 12),
         'head_dim must be a positive integer'),
        (dict(good, format='mmdcs-subnet/1'), 'not an OFB arch file'),
    ]
    for arch, match in cases:
        with pytest.raises(ArchFileError, match=match):
            _classifier(search=None, arch_file=arch)
    with pytest.raises(ArchFileError, match='not found'):
        _classifier(search=None, arch_file=str(tmp_path / 'missing.json'))
    bad = tmp_path / 'bad.json'
    bad.write_text('{not json')
    with pytest.raises(ArchFileError, match='bad.json: not a valid OFB arch file .corrupt or '
                       'truncated JSON'):
        _classifier(search=None, arch_file=str(bad))
    with pytest.raises(ValueError, match='either arch_file'):
        _classifier(search=None, arch_file=good, search_space=('mlp', ))
    with pytest.raises(ValueError, match='exactly one of target_flops'):
        _classifier(search=dict())
    with pytest.raises(ValueError, match='needs a supernet'):
        _classifier(search=dict(target_ratio=.5), arch_file=good)


def test_timm_names_load_into_the_supernet_and_the_dense_model():
    torch.manual_seed(0)
    vit = _build(dict(type='mmdcs.ViT', arch='deit-tiny', img_size=32))
    dense = _build(dict(type='mmdcs.OFBViT', arch='deit-tiny', img_size=32, search_space=()))
    dense.load_state_dict(vit.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    vit.eval(), dense.eval()
    assert_close_scaled(vit(x)[0], dense(x)[0], 1e-5)
    sup = _build(dict(type='mmdcs.OFBViT', arch='deit-tiny', img_size=32))
    missing, unexpected = sup.load_state_dict(vit.state_dict(), strict=False)
    assert not unexpected and all('bimask' in k or k == 'mask_token' for k in missing)


# ----------------------------------------------------------------------------- engine
def _samples(n):
    from mmpretrain.structures import DataSample
    return [DataSample().set_gt_label(i % 10) for i in range(n)]


def _batch(n=4, size=32):
    g = torch.Generator().manual_seed(0)
    return dict(inputs=[torch.randint(0, 255, (3, size, size), generator=g, dtype=torch.uint8)
                        for _ in range(n)], data_samples=_samples(n))


def test_hook_schedules_and_checks():
    from mmdcs.engine import OFBSearchHook
    hook = OFBSearchHook(warmup_epochs=20)
    assert hook.schedule_at(0) == pytest.approx((.99, .95))
    assert hook.schedule_at(10) == pytest.approx((.545, .85))
    assert hook.schedule_at(25) == pytest.approx((.1, .75))
    assert hook.interval_for(1250) == 416 and hook.interval_for(1250, accumulate=2) == 416
    assert hook.interval_for(2) == 1
    for kw, match in ((dict(threshold=1.), 'threshold'), (dict(interval=0), 'interval'),
                      (dict(w_p=(1.2, .1)), 'w_p'), (dict(keep_ratio=(0., .5)), 'keep_ratio')):
        with pytest.raises(ValueError, match=match):
            OFBSearchHook(**kw)


def test_demo_search_config_builds_and_takes_a_step():
    from mmengine.optim import build_optim_wrapper
    cfg = Config.fromfile(SEARCH_CFG)
    cfg.model.backbone.img_size = 32
    model = _build(cfg.model)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    groups = {g.get('ofb_group', 'weight'): g for g in wrapper.optimizer.param_groups}
    assert groups['arch']['betas'] == (0.5, 0.999) and groups['arch']['weight_decay'] == 1e-3
    assert groups['arch']['lr'] == cfg.optim_wrapper.paramwise_cfg.arch.lr
    assert groups['weight']['lr'] == cfg.optim_wrapper.optimizer.lr
    assert 'decoder' in groups
    model.set_schedule_(w_p=.9, keep_ratio=.75)
    alpha = model.backbone.blocks[0].mlp.bimask.alpha
    before = alpha.detach().clone()
    log = model.train_step(_batch(4, 32), wrapper)
    for k in ('loss', 'loss_ce', 'loss_attn', 'loss_mlp', 'loss_embed', 'loss_flops',
              'loss_pmim', 'gflops', 'pmim_l1'):
        assert k in log and torch.isfinite(log[k]), k
    assert not torch.equal(alpha.detach(), before)


@pytest.mark.xdist_group('train')
def test_resumed_search_rebuilds_sliced_shapes_and_optimizer(tiny_digits, tmp_path):
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    def cfg_for(work_dir, epochs, **extra):
        cfg = Config.fromfile(SEARCH_CFG)
        cls = osp.join(tiny_digits, 'cls')
        small = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=32),
                 dict(type='PackInputs')]
        cfg.merge_from_dict({
            'work_dir': work_dir, 'train_cfg.max_epochs': epochs, 'model.backbone.img_size': 32,
            'train_dataloader.dataset.data_root': cls, 'val_dataloader.dataset.data_root': cls,
            'test_dataloader.dataset.data_root': cls, 'train_dataloader.num_workers': 0,
            'val_dataloader.num_workers': 0, 'train_dataloader.batch_size': 8,
            'train_dataloader.dataset.indices': 24, 'val_dataloader.dataset.indices': 8,
            'train_dataloader.dataset.pipeline': small, 'val_dataloader.dataset.pipeline': small,
            'default_hooks.logger.interval': 1, 'log_level': 'WARNING',
            'default_hooks.checkpoint.save_best': None,
            'default_hooks.checkpoint.max_keep_ckpts': -1,
            # prune hard at every iteration so that the first epoch slices weights
            'custom_hooks': [dict(type='mmdcs.OFBSearchHook', warmup_epochs=1, interval=1,
                                  threshold=0.8)],
        })
        cfg.merge_from_dict(extra)
        return cfg

    runner = Runner.from_cfg(cfg_for(str(tmp_path), 1))
    runner.train()
    model = runner.model
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert model.backbone.embed_dim < 192 or any(
        b.mlp.hidden < 768 or b.attn.head_dim < 64 for b in model.backbone.blocks)
    x = torch.randn(2, 3, 32, 32)
    y = _logits(model, x)
    optim = copy.deepcopy(runner.optim_wrapper.state_dict())
    ckpt = osp.join(str(tmp_path), 'epoch_1.pth')

    seen = {}

    class Capture(Hook):
        priority = 'VERY_LOW'

        def before_train(self, runner):
            m = runner.model
            seen['shapes'] = {k: v.shape for k, v in m.state_dict().items()}
            seen['y'] = _logits(m, x)
            m.train()
            seen['optim'] = copy.deepcopy(runner.optim_wrapper.state_dict())

    runner2 = Runner.from_cfg(cfg_for(str(tmp_path / 'resumed'), 2, resume=True,
                                      load_from=ckpt))
    runner2.register_hook(Capture())
    runner2.train()
    assert seen['shapes'] == shapes
    assert_close_scaled(seen['y'], y, 1e-5)
    a, b = seen['optim']['state'], optim['state']
    assert a.keys() == b.keys() and a
    for pid in a:
        for name, v in a[pid].items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b[pid][name])), name
    assert runner2.epoch == 2


def test_export_tool_writes_files_that_rebuild_the_compact_model(tmp_path):
    tool = load_tool('tools/ofb_export.py')
    cfg = Config.fromfile(SEARCH_CFG)
    cfg.model.backbone.img_size = 32
    model = _build(cfg.model)
    _spread_alpha(model, seed=2)
    model.compress(0.2)                        # a checkpoint with sliced weights
    ckpt = str(tmp_path / 'search.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), ckpt)
    out = str(tmp_path / 'export')
    res = tool.export(tool.parse_args([SEARCH_CFG, ckpt, '--out', out, '--cfg-options',
                                       'model.backbone.img_size=32']))
    assert res['ok'] and res['discretised'] > 0
    assert res['rows'][1][2] < res['rows'][0][2]
    with open(osp.join(out, 'arch.json')) as f:
        arch = json.load(f)
    assert arch['embed_dim'] == res['arch']['embed_dim']
    # the fine-tuning config builds the compact network from the two files
    ft = Config.fromfile(FINETUNE_CFG)
    ft.model.backbone.img_size = 32
    ft.model.backbone.arch_file = osp.join(out, 'arch.json')
    compact = _build(ft.model)
    state = torch.load(osp.join(out, 'compact.pth'), map_location='cpu')['state_dict']
    compact.load_state_dict(state, strict=True)
    assert count_flops(compact.eval(), (32, 32)) == res['rows'][1][2]
    model.load_state_dict(torch.load(ckpt)['state_dict'])
    x = torch.randn(2, 3, 32, 32)
    model.finalize()
    assert_close_scaled(_logits(compact, x), _logits(model, x), 1e-5)


# ----------------------------------------------------------------------------- Swin
def _swin(search=dict(target_ratio=0.5), **backbone):
    return _build(dict(
        type='mmdcs.OFBClassifier',
        backbone=dict(type='mmdcs.OFBSwin', arch='swin-t', img_size=32, **backbone),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=768,
                  loss=dict(type='CrossEntropyLoss')),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
        search=search))


def test_swin_search_compress_fuse_and_export_are_exact():
    torch.manual_seed(0)
    model = _swin()
    _spread_alpha(model)
    for stage in model.backbone.layers:        # every stage's embedding gets narrower
        _favour_small(stage.embed_bimask)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    model.set_schedule_(keep_ratio=0.75)
    losses = model.loss(x, _samples(2))
    assert {'loss_ce', 'loss_attn', 'loss_mlp', 'loss_embed', 'loss_pmim'} <= set(losses)
    reference = copy.deepcopy(model)
    for _, _, bm in reference.backbone.named_bimasks():
        bm.drop_cells(0.2)
    report = model.compress(0.2)
    dims = model.backbone.dims
    assert all(d < f for d, f in zip(dims, (96, 192, 384, 768))), dims
    assert report['out_keep'] is not None and model.head.fc.weight.shape[1] == dims[-1]
    assert_close_scaled(_logits(model, x), _logits(reference, x), 1e-5)
    model.finalize()
    y = _logits(model, x)
    model.fuse()
    assert_close_scaled(_logits(model, x), y, 1e-5)
    arch = model.backbone.export_arch()
    assert [len(s['blocks']) for s in arch['stages']] == [2, 2, 6, 2]
    compact = _swin(search=None, arch_file=arch)
    state = {f'backbone.{k}': v for k, v in model.backbone.compact_state_dict().items()}
    state.update({k: v for k, v in model.state_dict().items() if k.startswith('head.')})
    missing, unexpected = compact.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {'keep_ratio', 'search_done'}
    assert_close_scaled(_logits(compact, x), y, 1e-5)
    assert float(model.expected_macs().detach()) == count_flops(compact, (32, 32))
    with pytest.raises(ArchFileError, match='3 stages'):
        _swin(search=None, arch_file=dict(arch, stages=arch['stages'][:3]))
    with pytest.raises(ArchFileError, match='stage 2 block 1: num_heads = 13 exceeds'):
        bad = copy.deepcopy(arch)
        bad['stages'][2]['blocks'][1]['num_heads'] = 13
        _swin(search=None, arch_file=bad)


# ----------------------------------------------------------------------------- ImageNet configs
OFB_CONFIGS = {  # name: (backbone, arch, target GFLOPs of the search, search epochs)
    'ofb-deit-s': ('OFBViT', 'deit-s', 1.0, 100),
    'ofb-deit-b': ('OFBViT', 'deit-b', 3.6, 200),
    'ofb-swin-t': ('OFBSwin', 'swin-t', 2.6, 100),
}


def _ofb_cfg(name):
    return Config.fromfile(osp.join(ROOT, 'configs/ofb', f'{name}_in1k.py'))


def test_full_scale_configs_have_the_public_settings():
    """Every ImageNet config: the public defaults (search.py / finetune.py / run_exp.sh), DeiT's
    repeated augmentation for both stages, and the sampler resolves from the config's scope."""
    from mmengine.registry import DATA_SAMPLERS
    on_disk = sorted(osp.basename(p)[:-len('_in1k.py')]
                     for p in glob.glob(osp.join(ROOT, 'configs/ofb', '*_in1k.py')))
    assert on_disk == sorted(f'{n}_{s}' for n in OFB_CONFIGS for s in ('search', 'finetune'))
    for name, (backbone, arch, target, epochs) in OFB_CONFIGS.items():
        search, finetune = _ofb_cfg(f'{name}_search'), _ofb_cfg(f'{name}_finetune')
        for cfg in (search, finetune):
            assert cfg.default_scope == 'mmpretrain'
            b = cfg.model.backbone
            assert (cfg.model.type, b.type, b.arch, b.img_size) == (
                'mmdcs.OFBClassifier', f'mmdcs.{backbone}', arch, 224)
            assert cfg.train_dataloader.batch_size == 128 == cfg.auto_scale_lr.base_batch_size / 8
            sampler = {k: v for k, v in cfg.train_dataloader.sampler.items() if k != '_scope_'}
            assert sampler == dict(type='RepeatAugSampler', shuffle=True, num_repeats=3)
            loss = cfg.model.head.loss
            assert (loss.type, loss.label_smooth_val, loss.mode, loss.get('loss_weight', 1.)) == (
                'LabelSmoothLoss', 0.1, 'original', 1.)
        assert search.model.search.target_flops == target
        assert 'arch_file' not in search.model.backbone
        assert search.train_cfg.max_epochs == epochs == search.param_scheduler[1].end
        assert search.optim_wrapper.optimizer.lr == pytest.approx(1e-3)
        assert search.model_wrapper_cfg.find_unused_parameters
        hook = search.custom_hooks[0]
        assert (hook.type, hook.warmup_epochs, hook.threshold) == ('mmdcs.OFBSearchHook', 20, 0.2)
        assert search.load_from == f'work_dirs/pretrained/{arch}_in1k.pth'
        export = f'work_dirs/{name}_search_in1k/export'
        assert finetune.model.backbone.arch_file == f'{export}/arch.json'
        assert finetune.load_from == f'{export}/compact.pth'
        assert finetune.train_cfg.max_epochs == 300
        assert finetune.optim_wrapper.optimizer.lr == pytest.approx(6e-4)
        assert finetune.optim_wrapper.paramwise_cfg.layer_decay_rate == 0.95
        assert finetune.custom_hooks == [dict(type='EMAHook', momentum=4e-5,
                                              priority='ABOVE_NORMAL')]
    # the sampler of the configs, as the runner builds it (mmpretrain's scope)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        sampler = DATA_SAMPLERS.build(dict(search.train_dataloader.sampler,
                                           dataset=list(range(10)), seed=0))
    assert type(sampler).__name__ == 'RepeatAugSampler' and len(sampler) == 10
    idx = list(sampler)
    assert all(idx[i] == idx[i + 1] == idx[i + 2] for i in range(0, 9, 3))  # 3 copies each


@pytest.mark.parametrize('name', ['ofb-deit-s', 'ofb-swin-t'])
def test_full_scale_search_steps_and_exports_to_its_finetune_config(name, tmp_path):
    """The ImageNet search config builds at 224, takes a step of its optimizer, and what
    tools/ofb_export.py writes from it builds the fine-tuning config's compact network."""
    from mmengine.optim import build_optim_wrapper
    tool = load_tool('tools/ofb_export.py')
    search_path = osp.join(ROOT, 'configs/ofb', f'{name}_search_in1k.py')
    cfg = Config.fromfile(search_path)
    cfg.model.head.num_classes = 10  # spare the 1000-way head; the rest as configured
    cfg.model.data_preprocessor = dict(cfg.data_preprocessor, num_classes=10)
    torch.manual_seed(0)
    model = _build(cfg.model)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    model.set_schedule_(w_p=.5, keep_ratio=.75)
    log = model.train_step(_batch(2, 224), wrapper)
    assert all(torch.isfinite(log[k]) for k in ('loss', 'loss_ce', 'loss_flops', 'loss_pmim'))
    _spread_alpha(model, seed=1)
    model.compress(0.2)
    ckpt = str(tmp_path / 'search.pth')
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), ckpt)
    out = str(tmp_path / 'export')
    options = ['model.head.num_classes=10', 'model.data_preprocessor.num_classes=10']
    res = tool.export(tool.parse_args([search_path, ckpt, '--out', out,
                                       '--cfg-options', *options]))
    assert res['ok'] and res['rows'][1][2] < res['rows'][0][2]
    # the unpruned network is DeiT-S / Swin-T (4.6 / 4.5 G MACs at 224, the 10-way head aside)
    assert res['rows'][0][2] / 1e9 == pytest.approx({'ofb-deit-s': 4.6, 'ofb-swin-t': 4.5}[name],
                                                    abs=0.05)
    # the search's expected FLOPs (its loss's input) are those of a width between both
    assert 0 < float(log['gflops']) * 1e9 < res['rows'][0][2]
    ft = Config.fromfile(osp.join(ROOT, 'configs/ofb', f'{name}_finetune_in1k.py'))
    ft.model.head.num_classes = 10
    ft.model.backbone.arch_file = osp.join(out, 'arch.json')
    compact = _build(ft.model)
    state = torch.load(osp.join(out, 'compact.pth'), map_location='cpu')['state_dict']
    compact.load_state_dict(state, strict=True)
    assert count_flops(compact.eval(), (224, 224)) == res['rows'][1][2]
