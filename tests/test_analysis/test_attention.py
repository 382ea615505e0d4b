"""mmdcs.analysis.attention, tools/analysis/attention.py and tools/analysis/vis_cam.py: row
entropies, query maps, Q/K ranks, Grad-CAM and the figures (tiny models, small inputs)."""
import math
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmdcs.analysis.attention import (AttentionNotSupported, attention_modules,
                                      collect_attention, entropy_table, grad_cam,
                                      masked_rank_bound, plot_attention_maps, plot_cams,
                                      plot_entropy_histograms, qk_of, qk_ranks, rank_table,
                                      row_entropy)
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import QKChannelSelector
from _tools import assert_close_scaled, load_tool  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool(name):
    return load_tool(f'tools/analysis/{name}.py')


def _pair(size=48):
    """A baseline DeiT-tiny and a DCS supernet with the same weights (gates all open)."""
    torch.manual_seed(0)
    base = ViT('deit-tiny', 'baseline', img_size=size).eval()
    dcs = ViT('deit-tiny', 'dcs', img_size=size)
    dcs.load_converted(base.state_dict())
    return base, dcs.eval()


def _random_gates_(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, QKChannelSelector):
                m.theta.weight.copy_(torch.randn(m.theta.weight.shape, generator=g))
                m.theta.bias.zero_()


def test_row_entropy_bounds():
    n = 7
    uniform = torch.full((2, 3, n, n), 1. / n)
    assert torch.allclose(row_entropy(uniform), torch.full((2, 3, n), math.log(n)), atol=1e-6)
    one_hot = torch.eye(n).expand(2, 3, n, n)
    assert torch.allclose(row_entropy(one_hot), torch.zeros(2, 3, n), atol=1e-7)
    rand = torch.randn(4, 2, n, n).softmax(-1)
    h = row_entropy(rand)
    assert h.shape == (4, 2, n)
    assert (h >= 0).all() and (h <= math.log(n) + 1e-6).all()


def test_collect_entropies_maps_and_ranks():
    base, dcs = _pair()
    x = torch.randn(2, 3, 48, 48)
    sb = collect_attention(base, x, rank_images=2)
    sd = collect_attention(dcs, x, rank_images=2)
    assert len(sb.blocks) == 12 and sb.family == 'vit' and not sb.qk_select and sd.qk_select
    n = 1 + 3 * 3
    for b in sb.blocks:
        e = sb.entropies[b]
        assert e.shape == (3, 2 * n)  # heads × (images · rows)
        assert (e >= -1e-6).all() and (e <= math.log(n) + 1e-5).all()
        assert sb.num_keys[b] == n
        # all gates open: the DCS supernet is the baseline, entropies included
        assert_close_scaled(sd.entropies[b], e, 1e-5)
        assert sb.maps[b].shape == (3, 3, 3)  # class-token query over the 3×3 patch grid
        assert torch.equal(sb.rank_masked[b], sb.rank_unmasked[b])
        assert (sb.rank_unmasked[b] <= min(n, 64)).all()
    # recording switched off again, nothing kept on the modules
    assert all(not m.record_attn and m.last_attn is None
               for m in attention_modules(dcs).values())
    md = entropy_table({'baseline': sb, 'dcs': sd})
    assert f'{math.log(n):.3f}' in md and md.count('\n') == 2 + 12 * 3 - 1
    assert 'QKᵀ' in rank_table({'baseline': sb, 'dcs': sd})


def test_masked_rank_bounds():
    """Channels closed for every token lower the rank to the channels left (DCS paper, Table 6);
    per-token masks are bounded by min(N, channels some token keeps), not by rank(QKᵀ)."""
    torch.manual_seed(0)
    dcs = ViT('deit-tiny', 'dcs', img_size=144).eval()  # N = 1 + 9·9 = 82 > head_dim 64
    closed = torch.zeros(192, dtype=torch.bool)
    for h in range(3):
        closed[h * 64:h * 64 + 16] = True  # 16 of the 64 channels of every head
    with torch.no_grad():
        for m in dcs.modules():
            if isinstance(m, QKChannelSelector):
                m.theta.weight.zero_()
                m.theta.bias.copy_(torch.where(closed, -3., 3.))
    st = collect_attention(dcs, torch.randn(1, 3, 144, 144), rank_images=1)
    for b in (st.blocks[0], st.blocks[-1]):
        assert st.rank_unmasked[b].tolist() == [64.] * 3
        assert st.rank_masked[b].tolist() == [48.] * 3 == st.rank_bound[b].tolist()
    # random per-token gates: never above min(N, channels some token keeps)
    _random_gates_(dcs)
    st = collect_attention(dcs, torch.randn(1, 3, 144, 144), rank_images=1)
    for b in st.blocks:
        assert (st.rank_masked[b] <= st.rank_bound[b]).all()
        assert (st.rank_bound[b] <= 64).all()
    assert 'min(N, c)' in rank_table({'dcs': st}, [0])
    # per-token masks can raise the rank of a rank-deficient product: Q = K of rank 1, token
    # i keeps channel i mod 4 only -> (Q⊙M)(K⊙M)ᵀ has rank 4
    q = torch.ones(1, 1, 6, 4)
    m = torch.nn.functional.one_hot(torch.arange(6) % 4, 4).float().view(1, 1, 6, 4)
    assert int(qk_ranks(q, q)) == 1 and int(qk_ranks(q * m, q * m)) == 4
    assert int(masked_rank_bound(q * m, q * m)) == 4
    # and directly on an attention module: head_dim columns bound the rank
    attn = attention_modules(dcs)['blocks.0.attn']
    q, k, qm, km = qk_of(attn, torch.randn(1, 40, 192))
    assert int(qk_ranks(q, k).max()) == 40  # 40 tokens, head_dim 64: full rank
    assert int(qk_ranks(q[..., :5], k[..., :5]).max()) == 5


def test_swin_and_mobilevit_maps_and_efficientvit_refused():
    from mmdcs.models.backbones.efficientvit import EfficientViT
    from mmdcs.models.backbones.mobilevit import MobileViT
    from mmdcs.models.backbones.swin import Swin
    torch.manual_seed(0)
    swin = Swin('swin-t', 'dcs', img_size=56).eval()  # 14×14 tokens: 2×2 windows, no padding
    st = collect_attention(swin, torch.randn(1, 3, 56, 56), rank_images=0, query=(0.1, 0.9))
    for b in ('layers.0.blocks.0.attn', 'layers.0.blocks.1.attn'):  # plain and shifted
        m = st.maps[b]
        assert m.shape == (3, 14, 14) and st.num_keys[b] == 49
        assert torch.allclose(m.sum((1, 2)), torch.ones(3), atol=1e-4)  # one window row
        assert float(m[0][st.query_cell[b]]) > 0
    mv = MobileViT('mobilevit-xs', 'kcr').eval()
    st = collect_attention(mv, torch.randn(1, 3, 64, 64), rank_images=1)
    b = st.blocks[0]
    assert st.maps[b].shape == (4, 4, 4) and st.query_cell[b] == (2, 2)
    assert st.rank_sequences[b] == 4  # the 4 pixel positions of a 2×2 patch
    with pytest.raises(AttentionNotSupported, match='linear attention'):
        collect_attention(EfficientViT('efficientvit-b0', 'dcs'), torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match='class token'):
        collect_attention(mv, torch.randn(1, 3, 64, 64), query='cls')


def test_figures_are_written(tmp_path):
    base, dcs = _pair(32)
    _random_gates_(dcs)
    x = torch.randn(2, 3, 32, 32)
    stats = {'baseline': collect_attention(base, x, rank_images=0),
             'dcs': collect_attention(dcs, x, rank_images=0)}
    hist = plot_entropy_histograms(stats, str(tmp_path / 'hist.png'), block=-1)
    image = (torch.rand(32, 32, 3) * 255).to(torch.uint8)
    amap = plot_attention_maps(image, {n: s.maps[s.blocks[-1]] for n, s in stats.items()},
                               str(tmp_path / 'map.png'), head=None)
    for p in (hist, amap):
        assert osp.getsize(p) > 10_000
    # a head the block does not have is refused (was: the last head, labelled "head 1000")
    heads = stats['dcs'].maps[stats['dcs'].blocks[-1]].shape[0]
    with pytest.raises(ValueError, match=f'head {heads} is not a head of the mapped block: it '
                                         f'has {heads} heads'):
        plot_attention_maps(image, {n: s.maps[s.blocks[-1]] for n, s in stats.items()},
                            str(tmp_path / 'map2.png'), head=heads)
    assert not osp.exists(tmp_path / 'map2.png')


def test_grad_cam_on_a_tiny_classifier(tmp_path):
    from mmdcs.analysis.complexity import build_classifier
    torch.manual_seed(0)
    model = build_classifier('deit-tiny', 'baseline', img_size=(32, 32))
    x = torch.randn(2, 3, 32, 32)
    cam, cls, prob = grad_cam(model, x)
    assert cam.shape == (2, 32, 32) and cls.shape == (2, ) and prob.shape == (2, )
    assert float(cam.min()) >= 0 and float(cam.max()) <= 1 + 1e-6 and float(cam.max()) > 0
    with torch.no_grad():
        logits = model(x, mode='tensor')
    # the predicted class: grad_cam's forward (with autograd) and this one may round
    # differently, so the argmax is compared where the two best logits are clearly apart
    top2 = logits.topk(2, -1).values
    clear = (top2[:, 0] - top2[:, 1]) > 1e-4 * float(logits.abs().max())
    assert clear.any() and torch.equal(cls[clear], logits.argmax(-1)[clear])
    cam7, cls7, _ = grad_cam(model, x, 'backbone.blocks.-1.norm1', target_class=7)
    assert (cls7 == 7).all()
    assert not model.training and all(p.grad is None for p in model.parameters())
    images = [(torch.rand(32, 32, 3) * 255).to(torch.uint8) for _ in range(2)]
    p = plot_cams(images, {'a': (cam, cls, prob), 'b': (cam7, cls7, prob)},
                  str(tmp_path / 'cam.png'))
    assert osp.getsize(p) > 10_000


def _tiny_cls_config(tmp_path):
    """A DeiT-tiny classifier config at 32 px (2 classes) and a folder of 4 images."""
    from PIL import Image
    img_dir = tmp_path / 'imgs'
    for c in ('a', 'b'):
        (img_dir / c).mkdir(parents=True)
        for i in range(2):
            arr = (torch.rand(40, 40, 3) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(img_dir / c / f'{i}.png')
    cfg = tmp_path / 'tiny_cls.py'
    cfg.write_text(f'''
default_scope = 'mmpretrain'
model = dict(type='ImageClassifier',
             backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=32),
             head=dict(type='LinearClsHead', num_classes=2, in_channels=192,
                       loss=dict(type='CrossEntropyLoss')))
data_preprocessor = dict(num_classes=2, mean=[127.5] * 3, std=[127.5] * 3, to_rgb=True)
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=32),
                 dict(type='PackInputs')]
val_dataloader = dict(batch_size=4, num_workers=0,
                      dataset=dict(type='CustomDataset', data_root='{img_dir}', data_prefix='',
                                   pipeline=test_pipeline),
                      sampler=dict(type='DefaultSampler', shuffle=False))
test_dataloader = val_dataloader
''')
    return str(cfg), str(img_dir)


def test_attention_cli(tmp_path, capsys):
    tool = _tool('attention')
    with pytest.raises(SystemExit) as e:
        tool.main(['--help'])
    assert e.value.code == 0 and '--rank-images' in capsys.readouterr().out
    out = tmp_path / 'att'
    proc = subprocess.run(
        [sys.executable, 'tools/analysis/attention.py', '--arch', 'deit-tiny', '--variants',
         'baseline', 'dcs', '--random-gates', '--random', '2', '--size', '32',
         '--rank-images', '1', '--out-dir', str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'Average row entropy' in proc.stdout
    for f in ('entropy_hist.png', 'attention_map.png', 'attention.md', 'attention.json'):
        assert osp.getsize(out / f) > 500
    with pytest.raises(SystemExit) as e:
        tool.main(['--arch', 'efficientvit-b0', '--random', '1', '--size', '32',
                   '--out-dir', str(tmp_path / 'x')])
    assert e.value.code == 2 and 'not supported' in capsys.readouterr().err
    # --head 999 of DeiT-Tiny's 3 heads: one line, nothing written (was: head 2 drawn as
    # "head 1000")
    with pytest.raises(SystemExit) as e:
        tool.main(['--arch', 'deit-tiny', '--variants', 'baseline', '--random', '1', '--size',
                   '32', '--rank-images', '0', '--head', '999', '--out-dir', str(tmp_path / 'h')])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err == ('error: --head 999: head 999 is not a head of the '
                                         'mapped block: it has 3 heads (0 to 2; -1: their '
                                         'mean)'), err
    assert not osp.exists(tmp_path / 'h')


def test_vis_cam_cli(tmp_path, capsys):
    tool = _tool('vis_cam')
    with pytest.raises(SystemExit) as e:
        tool.main(['--help'])
    assert e.value.code == 0 and '--target-layer' in capsys.readouterr().out
    cfg, img_dir = _tiny_cls_config(tmp_path)
    out = tmp_path / 'cam.png'
    proc = subprocess.run(
        [sys.executable, 'tools/analysis/vis_cam.py', '--model', cfg, 'none', '--images',
         img_dir, '--num-images', '3', '--out', str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'backbone.blocks.-1.norm1' in proc.stdout
    assert osp.getsize(out) > 10_000
    # a class the model does not have: one line before any image is read (was: a traceback)
    with pytest.raises(SystemExit) as e:
        tool.main(['--model', cfg, 'none', '--images', img_dir, '--target-class', '2',
                   '--out', str(tmp_path / 'cam2.png')])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.endswith('target class 2 is not a class of the model: it '
                                              'has 2 classes (0 to 1)'), err
    assert not osp.exists(tmp_path / 'cam2.png')
