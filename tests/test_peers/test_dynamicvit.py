"""DynamicViT / DynamicSwin: exact token counts at inference, attention masking in training, ρ = 1
equals the plain network, gather/restore, the loss terms, the frozen teacher, dense outputs for
mmdet / mmseg, the configs, and the backbone-freeze hook across a resume."""
import copy
import glob
import math
import os.path as osp

import pytest
import torch
import torch.nn as nn
from _mm_batches import seg_batch  # tests/ is on sys.path (the root conftest's directory)

import mmdcs.models.backbones.dynamic_vit as dynamic_vit_module
from mmdcs.models.backbones.dynamic_swin import DynamicSwin
from mmdcs.models.backbones.dynamic_vit import DynamicViT, policy_block_forward
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.backbones.vit import ViT, convert_timm
from mmdcs.peers.dynamicvit import (DynamicViTLoss, TokenPredictor, batch_index_select,
                                    keep_count, keep_ratios, policy_attention, restore_tokens,
                                    softmax_with_policy)
from mmdcs.utils.checkpoint import load_checkpoint_file
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(ROOT, 'configs/demo/dynamicvit-deit-tiny_digits.py')


def _vit_pair(img_size=64, seed=0, **kwargs):
    """A plain ViT and a DynamicViT (deit-tiny) with the same backbone weights, in eval mode."""
    torch.manual_seed(seed)
    vit = ViT('deit-tiny', img_size=img_size, **{k: v for k, v in kwargs.items()
                                                  if k in ('out_type', 'out_indices')})
    vit.init_weights()
    dyn = DynamicViT('deit-tiny', img_size=img_size, **kwargs)
    dyn.load_converted(vit.state_dict())
    torch.manual_seed(seed + 1)
    dyn._reset_predictors()
    return vit.eval(), dyn.eval()


def _token_counts(model, x):
    """Tokens entering every block (forward pre-hooks)."""
    counts = []
    hooks = [b.register_forward_pre_hook(lambda m, a: counts.append(a[0].shape[1]))
             for b in model.blocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return counts


# ----------------------------------------------------------------------------- counts
def test_keep_counts_and_ratio_schedules():
    assert [keep_count(r, 16) for r in keep_ratios(0.7, 3)] == [12, 8, 6]
    assert [keep_count(r, 196) for r in keep_ratios(0.7, 3)] == [138, 97, 68]
    # 0.8² · 25 = 16.000000000000004 in floating point: still 16, not 17
    assert 0.8**2 * 25 > 16 and keep_count(0.8**2, 25) == 16 and keep_count(0.5, 10) == 5
    assert keep_count(0.01, 16) == 1
    assert keep_ratios(0.7, 3, 'linear') == [0.7, 0.5, 0.3]
    for bad in (0., 1.2, -0.1):
        with pytest.raises(ValueError, match='keep ratio'):
            keep_ratios(bad, 3)
    with pytest.raises(ValueError, match='linear'):
        keep_ratios(0.7, 3, 'cubic')
    with pytest.raises(ValueError, match='must not increase'):
        DynamicViT('deit-tiny', img_size=64, keep_ratios=[0.5, 0.7, 0.3])
    with pytest.raises(ValueError, match='3 pruning locations'):
        DynamicViT('deit-tiny', img_size=64, keep_ratios=[0.7, 0.5])
    with pytest.raises(ValueError, match='strictly increasing'):
        DynamicViT('deit-tiny', img_size=64, pruning_loc=(6, 3))
    with pytest.raises(ValueError, match='strictly increasing'):
        DynamicViT('deit-tiny', img_size=64, pruning_loc=(3, 12))
    with pytest.raises(ValueError, match='unknown arch'):
        DynamicViT('deit-huge')
    with pytest.raises(ValueError, match='only the baseline'):
        DynamicViT('deit-tiny', variant='kcr')
    with pytest.raises(ValueError, match='give keep_ratios'):
        DynamicSwin('swin-t', keep_ratio=0.3)  # 0.3 - 0.4 < 0: the linear schedule fails
    with pytest.raises(ValueError, match='has 6 blocks'):
        DynamicSwin('swin-t', pruning_loc=(1, 2, 6))


@pytest.mark.parametrize('rho,hw', [(0.7, (64, 64)), (0.5, (96, 64)), (0.9, (48, 80))])
def test_inference_keeps_exactly_ceil_rho_n_tokens_per_stage(rho, hw):
    _, dyn = _vit_pair(keep_ratio=rho)
    n = (hw[0] // 16) * (hw[1] // 16)
    counts = _token_counts(dyn, torch.randn(2, 3, *hw))
    kept = [n] + [math.ceil(rho**s * n - 1e-6) for s in (1, 2, 3)]
    assert counts == [1 + k for k in kept for _ in range(3)]
    assert dyn.keep_counts(n) == kept[1:]


def test_inference_keeps_the_best_scored_tokens():
    """The kept tokens are the top-⌈ρN⌉ of the predictor's keep score, class token first."""
    _, dyn = _vit_pair(keep_ratio=0.5, pruning_loc=(2, ))
    x = torch.randn(2, 3, 64, 64)
    seen = {}
    dyn.score_predictor[0].register_forward_hook(lambda m, a, o: seen.update(score=o[..., 0],
                                                                            tokens=a[0]))
    dyn.blocks[2].register_forward_pre_hook(lambda m, a: seen.update(pruned=a[0]))
    with torch.no_grad():
        dyn(x)
    best = seen['score'].topk(8, dim=1).indices
    expected = batch_index_select(seen['tokens'], best)
    assert torch.equal(seen['pruned'][:, 1:], expected)
    assert seen['pruned'].shape[1] == 1 + 8


# ----------------------------------------------------------------------------- masking
def test_masked_softmax_ignores_dropped_keys():
    torch.manual_seed(0)
    attn = torch.randn(2, 3, 6, 6) * 5
    policy = torch.tensor([[1., 1., 0., 1., 0., 0.], [1., 0., 1., 1., 1., 0.]])
    w = softmax_with_policy(attn, policy, eps=0.)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 6))
    dropped = (policy == 0)[:, None, None, :].expand_as(w)
    diag = torch.eye(6, dtype=torch.bool).expand_as(w)
    assert torch.all(w[dropped & ~diag] == 0)
    assert torch.all(w[diag] > 0)  # a dropped token still attends to itself
    # a kept row equals the softmax over the kept keys alone
    keep = policy[0].bool()
    ref = attn[0, :, 0, keep].softmax(-1)
    assert torch.allclose(w[0, :, 0, keep], ref, atol=1e-6)
    # the public eps: dropped keys get at most eps / N
    w_eps = softmax_with_policy(attn, policy)
    assert w_eps[dropped & ~diag].max() <= 1e-6 / 6 + 1e-12
    # a huge logit of a dropped key neither overflows nor changes a kept row
    attn2 = attn.clone()
    attn2[..., 2] = 1e4
    w2 = softmax_with_policy(attn2, policy, eps=0.)
    assert torch.isfinite(w2).all() and torch.equal(w2[0, :, 0], w[0, :, 0])


def test_policy_attention_and_block_are_blind_to_dropped_tokens():
    torch.manual_seed(0)
    _, dyn = _vit_pair()
    blk = dyn.blocks[4]
    x = torch.randn(2, 17, 192)
    policy = (torch.rand(2, 17) > 0.5).float()
    policy[:, 0] = 1.
    noisy = x + 10 * torch.randn_like(x) * (1 - policy)[..., None]
    with torch.no_grad():
        for eps, exact in ((0., True), (1e-6, False)):
            a = policy_block_forward(blk, x, policy, eps)
            b = policy_block_forward(blk, noisy, policy, eps)
            kept = policy.bool()
            if exact:
                assert torch.equal(a[kept], b[kept])
            else:
                assert torch.allclose(a[kept], b[kept], atol=1e-4)
                assert not torch.equal(a[kept], b[kept])  # eps / N leaks, as in the public code
        # without the mask the change reaches every token: the test above can fail
        ones = torch.ones_like(policy)
        assert not torch.allclose(policy_block_forward(blk, x, ones, 0.)[kept],
                                  policy_block_forward(blk, noisy, ones, 0.)[kept], atol=1e-2)
    q = k = v = torch.randn(2, 3, 17, 64)
    assert_close_scaled(policy_attention(q, k, v, None, 0.125),
                        nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125), 1e-5)


@pytest.mark.parametrize('mask', [True, False])
def test_training_mask_blocks_dropped_tokens(monkeypatch, mask):
    """Perturbing, after the first pruning, the tokens the training decision dropped changes
    neither the class token, nor the kept tokens, nor the later decisions."""
    torch.manual_seed(0)
    dyn = DynamicViT('deit-tiny', img_size=64, keep_ratio=0.5, policy_eps=0.)
    dyn.init_weights()
    dyn.train()
    real = policy_block_forward

    def perturbed(blk, x, policy, eps):
        if blk is dyn.blocks[4]:
            noise = 10 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
            x = x + noise * (1 - policy)[..., None]
            if not mask:  # the same perturbation without attention masking
                policy = torch.ones_like(policy)
        return real(blk, x, policy, eps)

    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.manual_seed(3)
        ref = dyn(x)[0]
        ref_tokens, ref_decisions = dyn.last_tokens, dyn.last_decisions
        monkeypatch.setattr(dynamic_vit_module, 'policy_block_forward', perturbed)
        torch.manual_seed(3)
        out = dyn(x)[0]
    assert 0 < ref_decisions[0].sum() < ref_decisions[0].numel()  # some tokens were dropped
    kept = ref_decisions[-1].bool()
    if mask:
        assert torch.equal(out, ref)
        assert all(torch.equal(a, b) for a, b in zip(dyn.last_decisions, ref_decisions))
        assert torch.equal(dyn.last_tokens[kept], ref_tokens[kept])
    else:
        assert not torch.allclose(out, ref, atol=1e-3)


def test_training_decisions_are_cumulative_and_train_the_predictors():
    torch.manual_seed(0)
    dyn = DynamicViT('deit-tiny', img_size=64, keep_ratio=0.7)
    dyn.init_weights()
    dyn.train()
    out = dyn(torch.randn(4, 3, 64, 64))[0]
    d = dyn.last_decisions
    assert len(d) == 3 and all(t.shape == (4, 16) for t in d)
    assert all(set(t.unique().tolist()) <= {0., 1.} for t in d)
    assert torch.all(d[1] <= d[0]) and torch.all(d[2] <= d[1])  # dropped stays dropped
    assert torch.equal(dyn.last_mask, d[2]) and dyn.last_tokens.shape == (4, 16, 192)
    # the classification output alone reaches every predictor through the masked attention
    # (a random projection: the plain sum of a LayerNorm output is constant)
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).sum().backward()
    for p in dyn.score_predictor:
        assert p.out_conv[4].weight.grad.abs().sum() > 1e-4


# ----------------------------------------------------------------------------- ρ = 1
@pytest.mark.parametrize('out', [dict(out_type='cls_token'),
                                 dict(out_type='featmap', out_indices=(2, 5, 11))])
def test_rho_one_equals_vit(out):
    vit, dyn = _vit_pair(keep_ratio=1.0, **out)
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        a, b = vit(x), dyn(x)
    assert len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
    assert _token_counts(dyn, x) == [1 + 24] * 12


def test_timm_deit_checkpoint_loads_and_matches_vit():
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    sd = convert_timm(timm.create_model('deit_tiny_patch16_224', pretrained=False).state_dict(),
                      'deit-tiny')
    backbone = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    vit = ViT('deit-tiny').eval()
    vit.load_converted(backbone)
    dyn = DynamicViT('deit-tiny', keep_ratio=1.0).eval()
    missing, _ = dyn.load_converted(backbone)
    assert missing == []
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.equal(vit(x)[0], dyn(x)[0])
    with pytest.raises(KeyError, match='does not fit'):
        dyn.load_converted({'blocks.0.norm1.weight': torch.ones(192)})


def test_dynamic_swin_rho_one_equals_swin_and_routes_ceil_rho_n_tokens():
    torch.manual_seed(0)
    swin = Swin('swin-t', out_indices=(0, 1, 2, 3)).eval()
    dyn = DynamicSwin('swin-t', keep_ratios=[1., 1., 1.], out_indices=(0, 1, 2, 3)).eval()
    missing, _ = dyn.load_converted(swin.state_dict())
    assert missing == []
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(swin(x), dyn(x)))
    dyn = DynamicSwin('swin-t', keep_ratio=0.7, out_indices=(0, 1, 2, 3)).eval()
    stage = dyn.layers[2]
    seen = []
    for j, blk in enumerate(stage.blocks):
        blk.mlp.register_forward_pre_hook(lambda m, a, j=j: seen.append((j, 'mlp', a[0].shape)))
        if hasattr(blk, 'fastmlp'):
            blk.fastmlp.register_forward_pre_hook(
                lambda m, a, j=j: seen.append((j, 'fast', a[0].shape)))
    with torch.no_grad():
        outs = dyn(x)
    n = 6 * 8  # stage 2 of a 96x128 input: stride 16
    k = [keep_count(r, n) for r in (0.7, 0.5, 0.3)]
    assert k == [34, 24, 15]
    expected = [(0, 'mlp', (1, 6, 8, 384))]
    for j, kj in zip(range(1, 6), [k[0], k[1], k[2], k[2], k[2]]):
        expected += [(j, 'mlp', (1, kj, 384)), (j, 'fast', (1, n - kj, 384))]
    assert [(j, w, tuple(s)) for j, w, s in seen] == expected
    assert [tuple(o.shape) for o in outs] == [(1, 96, 24, 32), (1, 192, 12, 16),
                                             (1, 384, 6, 8), (1, 768, 3, 4)]


def test_dynamic_swin_training_streams():
    """Training: the forward value of every token is x + m·MLP(LN(x)) + (1−m)·Fast(x) of its
    block input, the stage output dense; the decisions (B, N) reach the predictors' gradients."""
    torch.manual_seed(0)
    dyn = DynamicSwin('swin-t', keep_ratio=0.7, pruning_loc=(1, ), keep_ratios=[0.5],
                      out_indices=(2, 3)).train()
    stage = dyn.layers[2]
    seen = {}
    stage.blocks[1].norm1.register_forward_pre_hook(lambda m, a: seen.update(inp=a[0]))
    stage.blocks[1].mlp.register_forward_hook(lambda m, a, o: seen.update(mlp=o))
    stage.blocks[1].fastmlp.register_forward_hook(lambda m, a, o: seen.update(fast=o))
    stage.blocks[2].norm1.register_forward_pre_hook(lambda m, a: seen.update(nxt=a[0]))
    outs = dyn(torch.randn(2, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == [(2, 384, 4, 4), (2, 768, 2, 2)]
    (m, ) = dyn.last_decisions
    assert m.shape == (2, 16) and dyn.last_mask is None and dyn.last_tokens.shape == (2, 4, 768)
    mask = m.reshape(2, 4, 4, 1)
    blk = stage.blocks[1]
    with torch.no_grad():
        xa = seen['inp'] + blk._attn(blk.norm1(seen['inp']))
        expected = xa + mask * blk.mlp(blk.norm2(xa)) + (1 - mask) * blk.fastmlp(xa)
    assert_close_scaled(seen['nxt'], expected, 1e-5)
    g = torch.Generator().manual_seed(1)
    sum((o * torch.randn(o.shape, generator=g)).sum() for o in outs).backward()
    assert stage.score_predictor[0].out_conv[4].weight.grad.abs().sum() > 1e-4


# ----------------------------------------------------------------------------- gather / restore
def test_gather_restore_round_trip():
    torch.manual_seed(0)
    x = torch.randn(3, 10, 4)
    perm = torch.stack([torch.randperm(10) for _ in range(3)])
    assert torch.equal(restore_tokens(torch.zeros_like(x), batch_index_select(x, perm), perm), x)
    keep = perm[:, :6]
    dense = torch.full_like(x, 7.)
    out = restore_tokens(dense, batch_index_select(x, keep), keep)
    for b in range(3):
        kept = set(keep[b].tolist())
        for i in range(10):
            assert torch.equal(out[b, i], x[b, i] if i in kept else dense[b, i])
    with pytest.raises(ValueError, match='does not fit'):
        batch_index_select(x, keep[:2])


def test_featmap_restores_dropped_tokens_with_their_drop_stage_features():
    """Eval, featmap after the second pruning: a position holds the block-5 output of a kept
    token, or the features the token had when it was dropped (before block 3 or block 6)."""
    _, dyn = _vit_pair(keep_ratio=0.6, out_type='featmap', out_indices=(6, 11))
    x = torch.randn(2, 3, 64, 64)
    seen = {}
    for i in (2, 5, 6):
        dyn.blocks[i].register_forward_hook(lambda m, a, o, i=i: seen.update({i: o}))
    with torch.no_grad():
        fm6, fm11 = dyn(x)
    tokens = fm6.flatten(2).transpose(1, 2)  # (B, 16, C)
    k1, k2 = keep_count(0.6, 16), keep_count(0.36, 16)
    assert (k1, k2) == (10, 6) and fm11.shape == (2, 192, 4, 4)
    for b in range(2):
        after6 = {tuple(t.tolist()) for t in seen[6][b, 1:]}
        after5 = seen[5][b, 1:]
        n_kept = n_drop1 = n_drop2 = 0
        for p in range(16):
            t = tokens[b, p]
            if tuple(t.tolist()) in after6:
                n_kept += 1
            elif torch.equal(t, seen[2][b, 1 + p]):
                n_drop1 += 1  # dropped at block 3: its block-2 output, at its own position
            elif any(torch.equal(t, u) for u in after5):
                n_drop2 += 1  # dropped at block 6: its block-5 output
        assert (n_kept, n_drop1, n_drop2) == (k2, 16 - k1, k1 - k2)


def test_training_featmap_is_dense_and_freezes_dropped_tokens():
    torch.manual_seed(0)
    dyn = DynamicViT('deit-tiny', img_size=64, keep_ratio=0.5, pruning_loc=(3, ),
                     out_type='featmap', out_indices=(5, ))
    dyn.init_weights()
    dyn.train()
    seen = {}
    dyn.blocks[2].register_forward_hook(lambda m, a, o: seen.update(before=o))
    (fm, ) = dyn(torch.randn(2, 3, 64, 64))
    tokens = fm.flatten(2).transpose(1, 2)
    dropped = dyn.last_decisions[0] == 0
    assert fm.shape == (2, 192, 4, 4) and dropped.any()
    assert torch.equal(tokens[dropped], seen['before'][:, 1:][dropped])


# ----------------------------------------------------------------------------- losses
def test_loss_terms_match_hand_computation():
    torch.manual_seed(0)
    B, N, C, K = 3, 5, 4, 6
    logits, t_logits = torch.randn(B, K), torch.randn(B, K)
    tokens, t_tokens = torch.randn(B, N, C), torch.randn(B, N, C)
    d1 = torch.tensor([[1., 1, 1, 0, 1], [1, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    d2 = torch.tensor([[1., 0, 1, 0, 0], [0, 0, 1, 1, 0], [1, 1, 0, 1, 0]])
    rhos = [0.7, 0.49]
    out = DynamicViTLoss(ratio_weight=2., kl_weight=0.5, distill_weight=0.5)(
        logits, tokens, [d1, d2], rhos, t_logits, t_tokens, d2)
    ratio = sum(sum((d[b].sum().item() / N - r)**2 for b in range(B)) / B
                for d, r in zip([d1, d2], rhos)) / 2
    kl = 0.
    for b in range(B):
        p, q = t_logits[b].softmax(-1), logits[b].softmax(-1)
        kl += (p * (p.log() - q.log())).sum().item()
    kl /= B
    sq, n = 0., 0
    for b in range(B):
        for i in range(N):
            if d2[b, i] > 0.5:
                sq += ((tokens[b, i] - t_tokens[b, i])**2).sum().item()
                n += C
    assert out['loss_ratio'].item() == pytest.approx(2. * ratio, rel=1e-5)
    assert out['loss_kl'].item() == pytest.approx(0.5 * kl, rel=1e-5)
    assert out['loss_distill'].item() == pytest.approx(0.5 * sq / n, rel=1e-5)
    assert out['keep_s2'].item() == pytest.approx(d2.mean().item())
    # Swin: no mask, every token; no token kept: 0
    swin = DynamicViTLoss(10., 0.5, 0.5)(logits, tokens, [d1], [0.7], t_logits, t_tokens)
    assert swin['loss_distill'].item() == pytest.approx(
        0.5 * ((tokens - t_tokens)**2).mean().item(), rel=1e-6)
    none = DynamicViTLoss()(logits, tokens, [d1], [0.7], t_logits, t_tokens, torch.zeros(B, N))
    assert none['loss_distill'].item() == 0.
    with pytest.raises(ValueError, match='target ratios'):
        DynamicViTLoss()(logits, tokens, [d1], rhos, t_logits, t_tokens)
    with pytest.raises(ValueError, match='≥ 0'):
        DynamicViTLoss(ratio_weight=-1.)


def test_predictor_global_feature_is_policy_weighted():
    torch.manual_seed(0)
    pred = TokenPredictor(8).eval()
    x = torch.randn(2, 5, 8)
    policy = torch.tensor([[1., 1., 0., 1., 0.], [1., 1., 1., 1., 1.]])
    out = pred(x, policy)
    assert out.shape == (2, 5, 2) and torch.allclose(out.exp().sum(-1), torch.ones(2, 5))
    noisy = x.clone()
    noisy[0, [2, 4]] += 100.
    assert torch.allclose(pred(noisy, policy)[0, [0, 1, 3]], out[0, [0, 1, 3]], atol=1e-6)
    assert torch.allclose(pred(x)[1], out[1], atol=1e-6)  # all alive: the plain mean
    assert torch.isfinite(pred(x, torch.zeros(2, 5))).all()  # nothing alive: no 0/0


def test_a_sample_losing_every_token_stays_finite():
    """With 16 tokens a sample can lose all of them in training (the public code divides by
    zero there); the class token carries on, the token distillation has nothing to compare."""
    torch.manual_seed(0)
    dyn = DynamicViT('deit-tiny', img_size=64, keep_ratio=0.7)
    dyn.init_weights()
    with torch.no_grad():
        dyn.score_predictor[0].out_conv[4].bias.copy_(torch.tensor([-50., 50.]))  # drop all
    dyn.train()
    out = dyn(torch.randn(2, 3, 64, 64))[0]
    assert torch.isfinite(out).all() and dyn.last_mask.sum() == 0
    loss = DynamicViTLoss()(torch.randn(2, 10), dyn.last_tokens, dyn.last_decisions,
                            dyn.keep_ratios, torch.randn(2, 10), torch.randn(2, 16, 192),
                            dyn.last_mask)
    assert all(torch.isfinite(v) for v in loss.values()) and loss['loss_distill'] == 0


# ----------------------------------------------------------------------------- classifier
def _demo_cfg(tmp_path, **options):
    """The demo config with a fresh teacher checkpoint (an untrained deit-tiny baseline)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    cfg = Config.fromfile(DEMO)
    path = str(tmp_path / 'teacher.pth')
    if not osp.exists(path):
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            torch.manual_seed(0)
            teacher = MODELS.build(copy.deepcopy(cfg.model.teacher))
            teacher.init_weights()
        torch.save({'state_dict': teacher.state_dict(), 'meta': {}}, path)
    cfg.model.teacher_checkpoint = path
    cfg.merge_from_dict(options)
    return cfg


def _build(model_cfg):
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(copy.deepcopy(model_cfg))


def _inputs_and_samples(model, batch):
    data = model.data_preprocessor(batch, True)
    return data['inputs'], data['data_samples']


def _fake_batch(n=4, size=64):
    from mmpretrain.structures import DataSample
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8)
              for _ in range(n)]
    return dict(inputs=inputs, data_samples=[DataSample().set_gt_label(i % 10) for i in range(n)])


def test_demo_config_takes_a_training_step_with_a_frozen_teacher(tmp_path):
    from mmengine.optim import build_optim_wrapper
    cfg = _demo_cfg(tmp_path)
    model = _build(cfg.model)
    model.init_weights()
    teacher = model.teacher
    # the student starts from the teacher; the teacher is outside the module tree
    t_state = teacher.state_dict()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in t_state.items())
    teacher_ids = {id(p) for p in teacher.parameters()}
    assert not teacher_ids & {id(p) for p in model.parameters()}
    assert not any(k.startswith(('teacher', '_teacher')) for k in model.state_dict())
    assert all(not p.requires_grad for p in teacher.parameters()) and not teacher.training

    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    groups = optim_wrapper.optimizer.param_groups
    in_optim = {id(p) for g in groups for p in g['params']}
    assert not teacher_ids & in_optim
    names = {id(p): n for n, p in model.named_parameters()}
    for g in groups:
        new = all('score_predictor' in names[id(p)] for p in g['params'])
        assert g['dynamicvit_backbone'] != new
        assert g['lr'] == pytest.approx(2e-3 if new else 2e-5)
        assert g['weight_decay'] == (0. if all(p.ndim == 1 for p in g['params']) else 0.05)
    assert id(model.backbone.pos_embed) not in in_optim

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.train()
    log_vars = model.train_step(_fake_batch(), optim_wrapper)
    assert {'loss', 'loss_cls', 'loss_ratio', 'loss_kl', 'loss_distill', 'keep_s1', 'keep_s2',
            'keep_s3'} <= set(log_vars)
    total = sum(float(log_vars[k]) for k in ('loss_cls', 'loss_ratio', 'loss_kl', 'loss_distill'))
    assert float(log_vars['loss']) == pytest.approx(total, rel=1e-5)
    assert all(torch.equal(teacher.state_dict()[k], v) for k, v in t_state.items())
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any('score_predictor' in n for n in moved)
    assert 'backbone.blocks.0.mlp.fc1.weight' in moved
    assert not teacher.training

    # inference: the pruned student, fewer FLOPs than the teacher at 64x64
    from mmdcs.analysis.complexity import count_flops
    model.eval()
    preds = model.val_step(_fake_batch(2))
    assert len(preds) == 2 and preds[0].pred_score.shape == (10, )
    assert count_flops(model, 64) < 0.8 * count_flops(teacher, 64)


def test_teacher_checkpoint_errors(tmp_path):
    cfg = _demo_cfg(tmp_path)
    missing = copy.deepcopy(cfg.model)
    missing.teacher_checkpoint = str(tmp_path / 'nope.pth')
    student = _build(missing)
    # evaluation and measurement of a trained student need no teacher
    student.eval()
    assert len(student.val_step(_fake_batch(2))) == 2
    # training does: the first loss (or init_weights) builds it and says what is wrong
    student.train()
    with pytest.raises(FileNotFoundError, match='nope.pth.*not found'):
        student.loss(*_inputs_and_samples(student, _fake_batch(2)))
    with pytest.raises(FileNotFoundError, match='nope.pth.*not found'):
        student.init_weights()
    none = copy.deepcopy(cfg.model)
    none.teacher_checkpoint = None
    with pytest.raises(ValueError, match='teacher_checkpoint is required'):
        _build(none).teacher
    torch.save({'state_dict': {'backbone.norm.weight': torch.ones(3)}}, tmp_path / 'bad.pth')
    bad = copy.deepcopy(cfg.model)
    bad.teacher_checkpoint = str(tmp_path / 'bad.pth')
    with pytest.raises(KeyError, match='does not fit the teacher'):
        _build(bad).teacher
    wrong = copy.deepcopy(cfg.model)
    wrong.teacher = 'vit'
    with pytest.raises(TypeError, match='teacher must be a model config dict'):
        _build(wrong)
    plain = copy.deepcopy(cfg.model)
    plain.backbone = dict(type='mmdcs.ViT', arch='deit-tiny', img_size=64)
    with pytest.raises(ValueError, match='DynamicViT or DynamicSwin backbone'):
        _build(plain)


@pytest.mark.parametrize('name', ['demo/deit-tiny_digits-cls.py',
                                  'demo/dynamicvit-deit-tiny_digits.py',
                                  'dynamicvit/dynamicvit-deit-s_0.7_in1k.py',
                                  'dynamicvit/dynamicvit-deit-b_0.7_in1k.py',
                                  'dynamicvit/dynamicswin-t_0.7_in1k.py',
                                  'dynamicvit/dynamicswin-s_0.7_in1k.py',
                                  'dynamicvit/dynamicswin-b_0.7_in1k.py'])
def test_configs_dump_and_reload(name, tmp_path):
    """The runner writes the resolved config (the teacher's model config inlined) into its work
    dir; that file must load back."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, 'configs', name))
    out = str(tmp_path / osp.basename(name))
    cfg.dump(out)
    assert Config.fromfile(out).to_dict() == cfg.to_dict()
    if 'dynamic' in name:
        assert cfg.model.teacher.type == 'ImageClassifier'


def test_classifier_builds_under_the_mmdcs_scope(tmp_path):
    """Under default_scope='mmdcs' (register_all_modules) the mmpretrain parts of the student
    and of the teacher are still found."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    cfg = _demo_cfg(tmp_path)
    with DefaultScope.overwrite_default_scope('mmdcs'):
        model = MODELS.build(copy.deepcopy(cfg.model))
    assert type(model.teacher).__name__ == 'ImageClassifier'
    assert type(model.head).__name__ == 'LinearClsHead'


def test_full_scale_configs_build(tmp_path):
    """The ImageNet configs: the public recipe's settings; DeiT-S and Swin-T classifiers build
    (teacher from a saved checkpoint) with the right parameter groups."""
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    expected = {
        'dynamicvit-deit-s_0.7_in1k.py': ('DynamicViT', 'deit-s', 2.0, 0.01, 30, 5, 1e-3),
        'dynamicvit-deit-b_0.7_in1k.py': ('DynamicViT', 'deit-b', 5.0, 0.01, 30, 5, 1e-3),
        'dynamicswin-t_0.7_in1k.py': ('DynamicSwin', 'swin-t', 10.0, 0.2, 120, 20, 4e-3),
        'dynamicswin-s_0.7_in1k.py': ('DynamicSwin', 'swin-s', 10.0, 0.2, 120, 20, 4e-3),
        'dynamicswin-b_0.7_in1k.py': ('DynamicSwin', 'swin-b', 10.0, 0.2, 120, 20, 4e-3),
    }
    on_disk = sorted(osp.basename(p) for p in glob.glob(osp.join(ROOT, 'configs/dynamicvit',
                                                                  'dynamic*_in1k.py')))
    assert on_disk == sorted(expected)  # a new ImageNet config comes with its settings here
    for name, (bb, arch, ratio_w, scale, epochs, warmup, lr) in expected.items():
        cfg = Config.fromfile(osp.join(ROOT, 'configs/dynamicvit', name))
        m = cfg.model
        assert (m.type, m.backbone.type, m.backbone.arch) == ('mmdcs.DynamicViTClassifier',
                                                              f'mmdcs.{bb}', arch)
        assert (m.ratio_weight, m.kl_weight, m.distill_weight) == (ratio_w, 0.5, 0.5)
        assert m.backbone.keep_ratio == 0.7
        assert cfg.optim_wrapper.backbone_lr_scale == scale
        assert cfg.optim_wrapper.optimizer.lr == lr and cfg.train_cfg.max_epochs == epochs
        assert cfg.param_scheduler[0].end == warmup == cfg.param_scheduler[1].begin
        assert cfg.param_scheduler[1].eta_min_ratio * lr == pytest.approx(1e-6)
        assert {'type': 'mmdcs.DynamicViTFreezeHook', 'fix_step': 5} in cfg.custom_hooks
        assert m.teacher.type == 'ImageClassifier' and m.teacher.backbone.variant == 'baseline'
        assert cfg.train_dataloader.batch_size == 128
        if arch == 'deit-b':  # the same code as DeiT-S; spare writing a 350 MB teacher
            assert m.teacher.backbone.arch == 'vit-b16' and m.backbone.drop_path_rate == 0.2
            continue
        if arch in ('swin-s', 'swin-b'):  # main.py: 'swin-s' / 'swin-b', README: drop path
            assert m.teacher.backbone.arch == arch and m.teacher.backbone.variant == 'baseline'
            assert m.backbone.pruning_loc == (2, 4, 6) and m.backbone.out_indices == (3, )
            assert m.backbone.drop_path_rate == {'swin-s': 0.2, 'swin-b': 0.5}[arch]
            assert m.head.in_channels == m.teacher.head.in_channels == {'swin-s': 768,
                                                                        'swin-b': 1024}[arch]
            assert m.teacher_checkpoint == f'checkpoints/{arch}_in1k.pth'
            assert cfg.optim_wrapper.accumulative_counts == 4
            continue
        from mmengine.registry import DefaultScope

        from mmdcs.registry import MODELS
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            teacher = MODELS.build(copy.deepcopy(m.teacher))
        path = str(tmp_path / f'{arch}.pth')
        torch.save({'state_dict': teacher.state_dict()}, path)
        del teacher
        m.teacher_checkpoint = path
        m.data_preprocessor = cfg.data_preprocessor  # as the runner does
        model = _build(m)
        ow = build_optim_wrapper(model, cfg.optim_wrapper)
        lrs = sorted({g['lr'] for g in ow.optimizer.param_groups})
        assert lrs == pytest.approx([lr * scale, lr])
        if bb == 'DynamicSwin':
            fast = model.backbone.layers[2].blocks[1].fastmlp.fc1[1].weight
            group = [g for g in ow.optimizer.param_groups if any(p is fast for p in g['params'])]
            assert group[0]['lr'] == lr  # the fast path is new: full rate
        # one step of the recipe (Mixup / CutMix, label smoothing, teacher terms) on 64x64
        model.init_weights()
        model.train()
        log_vars = model.train_step(_fake_batch(2, 64), ow)
        assert all(math.isfinite(float(log_vars[k])) for k in
                   ('loss', 'loss_cls', 'loss_ratio', 'loss_kl', 'loss_distill'))
        del model


# ----------------------------------------------------------------------------- mmdet / mmseg
@pytest.mark.parametrize('name', ['mask-rcnn_dynamicswin-t_fpn_1x_coco.py',
                                  'upernet_dynamicswin-t_512x512_160k_ade20k.py',
                                  'upernet_dynamicvit-deit-s_mln_512x512_160k_ade20k.py'])
def test_downstream_configs_build_train_and_predict(name, tmp_path):
    """The mmdet / mmseg configs: dense feature maps of the right sizes in both modes, fixed
    predictors, one training step with the config's optimizer, predictions."""
    det = name.startswith('mask')
    pytest.importorskip('mmdet' if det else 'mmseg')
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    cfg = Config.fromfile(osp.join(ROOT, 'configs/dynamicvit', name))
    cfg.dump(str(tmp_path / name))  # what the runner writes into its work dir loads back
    assert Config.fromfile(str(tmp_path / name)).to_dict() == cfg.to_dict()
    b = cfg.model.backbone
    assert b.freeze_predictors and b.init_cfg.type == 'Pretrained'
    assert b.init_cfg.prefix == 'backbone.' and b.init_cfg.checkpoint.endswith('.pth')
    b.init_cfg = None
    if det:
        from mmdet.registry import MODELS
        from mmdet.testing import demo_mm_inputs
        from mmdet.utils import register_all_modules
        train_cfg, test_cfg = cfg.model.train_cfg, cfg.model.test_cfg
        train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=50)
        train_cfg.rcnn.sampler.num = 32
        test_cfg.rpn.update(nms_pre=200, max_per_img=20)
        data = demo_mm_inputs(batch_size=1, image_shapes=[(3, 128, 160)], num_classes=80,
                              with_mask=True)
    else:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
        cfg.model.data_preprocessor.size = (64, 64)
        data = seg_batch()
    register_all_modules(init_default_scope=False)
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = revert_sync_batchnorm(MODELS.build(cfg.model))
        bb = model.backbone
        assert type(bb) is (DynamicSwin if 'swin' in name else DynamicViT)
        predictors = [p for n, p in bb.named_parameters() if 'score_predictor' in n]
        assert predictors and not any(p.requires_grad for p in predictors)
        x = torch.randn(1, 3, 160, 224)
        for train in (False, True):
            bb.train(train)
            with torch.no_grad():
                outs = bb(x)
            if isinstance(bb, DynamicSwin):
                assert [tuple(f.shape[-2:]) for f in outs] == [(40, 56), (20, 28), (10, 14),
                                                               (5, 7)]
            else:
                assert [tuple(f.shape) for f in outs] == [(1, 384, 10, 14)] * 4
        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
        frozen = [p.detach().clone() for p in predictors]
        model.train()
        log_vars = model.train_step(data, optim_wrapper)
        assert torch.isfinite(torch.as_tensor(log_vars['loss']))
        assert all(torch.equal(a, b) for a, b in zip(frozen, predictors))
        model.eval()
        with torch.no_grad():
            results = model.test_step(data)
    assert len(results) == len(data['inputs'])


def test_dynamicvit_as_mmdet_backbone_returns_full_size_featmaps():
    pytest.importorskip('mmdet')
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.registry import DefaultScope
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmdet'):
        bb = MODELS.build(dict(type='mmdcs.DynamicViT', arch='deit-tiny', img_size=224,
                               keep_ratio=0.5, out_type='featmap', out_indices=(2, 5, 8, 11)))
    x = torch.randn(2, 3, 96, 160)
    for train in (False, True):
        bb.train(train)
        outs = bb(x)
        assert [tuple(o.shape) for o in outs] == [(2, 192, 6, 10)] * 4


# ----------------------------------------------------------------------------- freeze hook
def test_freeze_hook_and_constructor_refuse_bad_input():
    from mmdcs.engine.dynamicvit_hooks import (DynamicViTFreezeHook,
                                               DynamicViTOptimWrapperConstructor)
    with pytest.raises(ValueError, match='integer ≥ 0'):
        DynamicViTFreezeHook(fix_step=-1)
    with pytest.raises(ValueError, match='paramwise_cfg'):
        DynamicViTOptimWrapperConstructor(dict(optimizer=dict(type='AdamW', lr=1e-3)),
                                          dict(norm_decay_mult=0.))
    ctor = DynamicViTOptimWrapperConstructor(dict(optimizer=dict(type='AdamW', lr=1e-3)))
    with pytest.raises(ValueError, match='no parameter matches'):
        ctor(ViT('deit-tiny', img_size=32))


@pytest.mark.xdist_group('train')
def test_freeze_hook_freezes_the_backbone_for_fix_step_epochs_across_resume(tiny_digits,
                                                                            tmp_path):
    """fix_step = 2 of 3 epochs: the backbone (and head) stay fixed in epochs 0 and 1 while the
    predictors train, and move in epoch 2, in one run and in a run resumed after epoch 1; the
    checkpointed learning rates are the scheduler's, not the zeroed ones."""
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    class Probe(Hook):
        priority = 'VERY_LOW'

        def __init__(self):
            self.moved = {}

        def before_train_epoch(self, runner):
            m = runner.model
            self.start = (m.backbone.blocks[0].attn.qkv.weight.detach().clone(),
                          m.head.fc.weight.detach().clone(),
                          m.backbone.score_predictor[0].out_conv[4].weight.detach().clone())

        def after_train_epoch(self, runner):
            m = runner.model
            now = (m.backbone.blocks[0].attn.qkv.weight, m.head.fc.weight,
                   m.backbone.score_predictor[0].out_conv[4].weight)
            self.moved[runner.epoch] = tuple(not torch.equal(a, b)
                                             for a, b in zip(self.start, now))

    cls = osp.join(tiny_digits, 'cls')

    def make(work_dir, **extra):
        cfg = _demo_cfg(tmp_path, **{
            'work_dir': work_dir, 'train_cfg.max_epochs': 3, 'train_cfg.val_interval': 100,
            'custom_hooks': [dict(type='mmdcs.DynamicViTFreezeHook', fix_step=2)],
            'train_dataloader.dataset.data_root': cls, 'val_dataloader.dataset.data_root': cls,
            'test_dataloader.dataset.data_root': cls,
            'train_dataloader.dataset.indices': 16, 'val_dataloader.dataset.indices': 8,
            'train_dataloader.batch_size': 8, 'val_dataloader.batch_size': 8,
            'train_dataloader.num_workers': 0, 'val_dataloader.num_workers': 0,
            'default_hooks.checkpoint.save_best': None,
            'default_hooks.checkpoint.max_keep_ckpts': -1, 'default_hooks.logger.interval': 1,
            **extra})
        runner = Runner.from_cfg(cfg)
        probe = Probe()
        runner.register_hook(probe)
        return runner, probe

    work = str(tmp_path / 'run')
    runner, probe = make(work)
    runner.train()
    frozen, thawed = (False, False, True), (True, True, True)
    assert probe.moved == {0: frozen, 1: frozen, 2: thawed}
    ckpt = load_checkpoint_file(osp.join(work, 'epoch_1.pth'))
    lrs = [g['lr'] for g in ckpt['optimizer']['param_groups'] if g['dynamicvit_backbone']]
    assert lrs and all(lr > 0 for lr in lrs)
    assert not any(k.startswith('_teacher') for k in ckpt['state_dict'])

    runner2, probe2 = make(str(tmp_path / 'resumed'), resume=True,
                           load_from=osp.join(work, 'epoch_1.pth'))
    runner2.train()
    assert probe2.moved == {1: frozen, 2: thawed}
