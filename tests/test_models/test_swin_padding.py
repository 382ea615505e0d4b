"""Swin at input sizes that need window padding: the features of every stage equal the reference
implementations themselves, after weight conversion (one random timm Swin-T, converted to mmdcs,
to the official layout and from there by mmdet's own ``swin_converter`` to mmdet):

* ``window_padding='mmdet'`` (default: pad, then shift) equals mmdet's ``SwinTransformer``;
* ``window_padding='timm'`` (shift, then pad) equals timm's ``swin_tiny_patch4_window7_224``
  built for that input size.

At these sizes the two orders give different features (the test would not see a swapped order
otherwise); at 224 (no padding) they agree.
"""
import functools
import re

import pytest
import torch

from mmdcs.models.backbones.swin import TIMM_MODELS, Swin

#: stage maps 80×64 .. 10×8, 64×64 .. 8×8, 80×80 .. 10×10: none a multiple of 7
SIZES = [(320, 256), (256, 256), (320, 320)]
ATOL = 1e-4


@functools.lru_cache(maxsize=None)
def _timm_state():
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    model = timm.create_model(TIMM_MODELS['swin-t'], pretrained=False)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _ours(window_padding=None, **kwargs):
    from mmdcs.models.backbones.swin import convert_timm
    torch.manual_seed(0)
    if window_padding is not None:
        kwargs['window_padding'] = window_padding
    m = Swin('swin-t', 'baseline', out_indices=(0, 1, 2, 3), **kwargs)
    state = {k[len('backbone.'):]: v for k, v in convert_timm(_timm_state(), 'swin-t').items()
             if k.startswith('backbone.')}
    missing, unexpected = m.load_state_dict(state, strict=False)
    assert not unexpected and all(re.fullmatch(r'norm[012]\.(weight|bias)', k) for k in missing)
    with torch.no_grad():  # stage norms that a classification checkpoint does not have
        for i in range(3):
            norm = getattr(m, f'norm{i}')
            norm.weight.normal_(1., .1, generator=torch.Generator().manual_seed(i))
            norm.bias.normal_(0., .1, generator=torch.Generator().manual_seed(10 + i))
    return m.eval()


def _mmdet_model(ours: Swin):
    """mmdet's SwinTransformer with the same weights: timm → official layout → mmdet's own
    ``swin_converter`` (which reorders PatchMerging to its Unfold order); the stage norms are
    copied from ours."""
    from mmdet.models.backbones.swin import SwinTransformer, swin_converter
    official = {}
    for k, v in _timm_state().items():
        k = re.sub(r'^layers\.(\d+)\.downsample',
                   lambda m: f'layers.{int(m.group(1)) - 1}.downsample', k)
        official[k.replace('head.fc.', 'head.')] = v
    state = {k[len('backbone.'):]: v for k, v in swin_converter(official).items()}
    ref = SwinTransformer(pretrain_img_size=224, embed_dims=96, depths=(2, 2, 6, 2),
                          num_heads=(3, 6, 12, 24), window_size=7, mlp_ratio=4, qkv_bias=True,
                          drop_path_rate=0., out_indices=(0, 1, 2, 3))
    ref.eval()  # (mmdet's train() returns None)
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert set(unexpected) <= {'norm.weight', 'norm.bias'}, unexpected
    assert all(re.fullmatch(r'norm[0-3]\.(weight|bias)|.*relative_position_index', k)
               for k in missing), missing
    with torch.no_grad():
        for i in range(4):
            getattr(ref, f'norm{i}').load_state_dict(getattr(ours, f'norm{i}').state_dict())
    return ref


def _timm_stages(hw):
    """Features of every stage of timm's model built for ``hw`` (NHWC → NCHW), and the
    final norm applied to the last one (what our norm3 is)."""
    import timm
    model = timm.create_model(TIMM_MODELS['swin-t'], pretrained=False, img_size=hw).eval()
    model.load_state_dict(_timm_state())
    return model


def _stage_features(model, x, stages):
    feats = []
    hooks = [s.register_forward_hook(lambda m, i, o: feats.append(o)) for s in stages]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return feats


def _input(hw, seed=0):
    return torch.randn((1, 3) + tuple(hw), generator=torch.Generator().manual_seed(seed))


def _max_diffs(a, b):
    return [float((p - q).abs().max()) for p, q in zip(a, b)]


@pytest.mark.parametrize('hw', SIZES)
def test_default_order_equals_mmdet_swin_at_every_stage(hw):
    ours = _ours()
    assert ours.window_padding == 'mmdet'
    ref = _mmdet_model(ours)
    x = _input(hw)
    with torch.no_grad():
        out, expected = ours(x), ref(x)
    assert len(out) == len(expected) == 4
    assert [o.shape for o in out] == [e.shape for e in expected]
    diffs = _max_diffs(out, expected)
    assert max(diffs) < ATOL, diffs


@pytest.mark.parametrize('hw', SIZES)
def test_timm_order_equals_timm_swin_at_every_stage(hw):
    ours = _ours('timm')
    ref = _timm_stages(hw)
    x = _input(hw, seed=1)
    mine = _stage_features(ours, x, list(ours.layers))
    theirs = _stage_features(ref, x, list(ref.layers))
    assert [t.shape for t in mine] == [t.shape for t in theirs]
    diffs = _max_diffs(mine, theirs)
    assert max(diffs) < ATOL, diffs
    # and the normalised outputs: our norm3 is timm's final norm
    with torch.no_grad():
        out = ours(x)[3]
        final = ref.norm(theirs[3]).permute(0, 3, 1, 2)
    assert float((out - final).abs().max()) < ATOL


@pytest.mark.parametrize('hw', SIZES)
def test_the_two_orders_differ_where_padding_is_needed(hw):
    x = _input(hw, seed=2)
    a, b = _ours('mmdet'), _ours('timm')
    with torch.no_grad():
        diffs = _max_diffs(a(x), b(x))
    assert diffs[0] > 1e-3 and max(diffs) > 1e-2, diffs


def test_the_two_orders_agree_without_padding():
    x = _input((224, 224), seed=3)
    a, b = _ours('mmdet'), _ours('timm')
    with torch.no_grad():
        diffs = _max_diffs(a(x), b(x))
    assert max(diffs) < 1e-5, diffs


def test_mmdet_order_with_pad_small_map_equals_mmdet_at_small_maps():
    """192×160: stage 3 is 6×5, smaller than the window; mmdet keeps the 7×7 window and the
    shift there, as ``pad_small_map=True`` does."""
    ours = _ours(pad_small_map=True)
    ref = _mmdet_model(ours)
    x = _input((192, 160), seed=4)
    with torch.no_grad():
        diffs = _max_diffs(ours(x), ref(x))
    assert max(diffs) < ATOL, diffs


def test_unknown_window_padding_is_refused():
    with pytest.raises(ValueError, match='window_padding'):
        Swin('swin-t', window_padding='official')
