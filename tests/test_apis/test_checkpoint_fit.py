"""A checkpoint that does not fit the model it is loaded into (mmdcs/utils/checkpoint.py
``check_loaded``, patched into mmengine's ``load_state_dict``): a load that fills few or none of
the weights it is meant to fill, or fills some with tensors of another shape, is refused in one
line (matched / missing / unexpected / mis-shaped, the switch that allows it) — through
``tools/test.py``'s CHECKPOINT, ``load_from`` and ``init_cfg=dict(type='Pretrained')``, for
mmpretrain and mmdet configs — unless ``allow_partial_checkpoint = True``; a head or neck that a
downstream model adds, and the gates of a supernet initialised from a baseline, stay normal."""
import os.path as osp
import re

import pytest
import torch

import mmdcs.registry  # noqa: F401  (registers the loaders)
from mmdcs.utils.checkpoint import (PARTIAL_KEY, MismatchedCheckpointError, trust_checkpoints,
                                    trust_scope)
from _tools import digits_opts, run_main  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLS_CFG = 'configs/demo/mobilevit-xs_digits-cls.py'
DET_CFG = 'configs/det/ssdlite_mobilevit-xs_200e_coco.py'
SEG_CFG = 'configs/seg/upernet_swin-t_512x512_160k_ade20k.py'


def _head(in_channels, num_classes=10):
    return dict(type='LinearClsHead', num_classes=num_classes, in_channels=in_channels)


DEIT = dict(type='ImageClassifier', backbone=dict(type='mmdcs.ViT', arch='deit-tiny',
                                                  img_size=64),
            neck=None, head=_head(192))
MOBILEVIT = dict(type='ImageClassifier',
                 backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='baseline'),
                 neck=dict(type='GlobalAveragePooling'), head=_head(384))


@pytest.fixture(autouse=True)
def _fresh_trust():
    with trust_scope():
        trust_checkpoints(all=False, partial=False, complete=False)
        yield


def _build(cfg):
    from mmengine.registry import DefaultScope

    import mmpretrain.utils
    from mmdcs.registry import MODELS
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def _save(model, path, keep=lambda k: True):
    torch.save({'state_dict': {k: v for k, v in model.state_dict().items() if keep(k)},
                'meta': {}}, path)
    return path


@pytest.fixture(scope='module')
def deit_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    return _save(_build(DEIT), str(tmp_path_factory.mktemp('ckpt') / 'deit-tiny.pth'))


def _one_line(err):
    msg = str(err)
    assert '\n' not in msg, msg
    return msg


# ----------------------------------------------------------------------------- the check
def test_another_architecture_is_refused_through_load_from_and_init_cfg(deit_ckpt):
    from mmengine.runner import load_checkpoint
    model = _build(MOBILEVIT)
    with pytest.raises(MismatchedCheckpointError) as e:       # load_from / test.py's path
        load_checkpoint(model, deit_ckpt, map_location='cpu')
    msg = _one_line(e.value)
    assert msg.startswith(f'{deit_ckpt} does not fit the model (ImageClassifier)'), msg
    assert 'mis-shaped (e.g. head.fc.weight: (10, 192) in the file, (10, 384) in the model)' \
        in msg, msg
    assert f'{PARTIAL_KEY} = True' in msg and 'unexpected' in msg and 'missing' in msg
    # init_cfg Pretrained (after its prefix): the backbone's weights, none of which it fills
    cfg = dict(MOBILEVIT, backbone=dict(MOBILEVIT['backbone'], init_cfg=dict(
        type='Pretrained', checkpoint=deit_ckpt, prefix='backbone.')))
    model = _build(cfg)
    with pytest.raises(MismatchedCheckpointError) as e:
        model.backbone.init_weights()
    msg = _one_line(e.value)
    assert msg.startswith(f'{deit_ckpt} does not fit MobileViT: it fills none of the weights'), msg
    assert re.search(r': 0 of the (\d+) tensors matched \(0\.0 % of their values\), \1 missing, '
                     r'[1-9]\d* unexpected, 0 mis-shaped', msg), msg
    # asked for explicitly: loaded as far as it goes
    trust_checkpoints(partial=True)
    load_checkpoint(_build(MOBILEVIT), deit_ckpt, map_location='cpu')
    model.backbone.init_weights()


def test_a_head_of_another_shape_is_refused_unless_partial_is_asked_for(tmp_path):
    from mmengine.runner import load_checkpoint
    torch.manual_seed(0)
    src = _build(dict(MOBILEVIT, head=_head(384, num_classes=100)))
    path = _save(src, str(tmp_path / 'in100.pth'))
    dst = _build(MOBILEVIT)
    with pytest.raises(MismatchedCheckpointError) as e:
        load_checkpoint(dst, path, map_location='cpu')
    assert '0 missing, 0 unexpected, 2 mis-shaped (e.g. head.fc.' in _one_line(e.value)
    trust_checkpoints(partial=True)
    load_checkpoint(dst, path, map_location='cpu')
    for k, v in src.backbone.state_dict().items():
        assert torch.equal(dst.backbone.state_dict()[k], v), k


def test_a_part_the_checkpoint_lacks_stays_normal_except_for_a_test(tmp_path):
    """A checkpoint of a backbone (``backbone.*`` only) loaded into a whole model: the head it
    lacks keeps its initialisation (a downstream model from a classifier's backbone); under
    tools/test.py (``complete``) that would evaluate random weights: refused."""
    from mmengine.runner import load_checkpoint
    torch.manual_seed(0)
    src = _build(MOBILEVIT)
    path = _save(src, str(tmp_path / 'backbone.pth'), keep=lambda k: k.startswith('backbone.'))
    dst = _build(MOBILEVIT)
    load_checkpoint(dst, path, map_location='cpu')
    assert all(torch.equal(dst.backbone.state_dict()[k], v)
               for k, v in src.backbone.state_dict().items())
    trust_checkpoints(complete=True)
    with pytest.raises(MismatchedCheckpointError, match='weights at their initialisation') as e:
        load_checkpoint(dst, path, map_location='cpu')
    assert '277 of the 279 tensors matched (99.8 % of their values), 2 missing, 0 unexpected, ' \
        '0 mis-shaped (e.g. head.fc.weight missing)' in _one_line(e.value)
    # the whole model's checkpoint is complete
    load_checkpoint(dst, _save(src, str(tmp_path / 'all.pth')), map_location='cpu')
    # the backbone is always meant: a file of the head alone leaves it all at initialisation
    trust_checkpoints(complete=False)
    head = _save(src, str(tmp_path / 'head.pth'), keep=lambda k: k.startswith('head.'))
    with pytest.raises(MismatchedCheckpointError, match=r'it fills few of the weights: 2 of the '
                       r'\d+ tensors of its parts meant \(backbone, head\) matched'):
        load_checkpoint(dst, head, map_location='cpu')


def test_a_supernet_from_a_pretrained_baseline_loads(deit_ckpt):
    """The search's usual start: a DCS supernet backbone initialised from a baseline DeiT (the
    gates it adds are missing from the file: a small share of the values)."""
    cfg = dict(DEIT, backbone=dict(DEIT['backbone'], variant='dcs', init_cfg=dict(
        type='Pretrained', checkpoint=deit_ckpt, prefix='backbone.')))
    model = _build(cfg)
    model.backbone.init_weights()
    ref = torch.load(deit_ckpt, weights_only=True)['state_dict']
    assert torch.equal(model.backbone.blocks[3].mlp.fc1.weight,
                       ref['backbone.blocks.3.mlp.fc1.weight'])


@pytest.fixture(scope='module')
def search_ckpt(tmp_path_factory):
    """(the supernet classifier of a DCS search of DeiT-Tiny, built without its objective as the
    export builds it, and a checkpoint of its search: its weights, gates, Linear_θ and the
    budget's multiplier ``cost_mu``)."""
    torch.manual_seed(0)
    search = _build(dict(DEIT, type='mmdcs.ChannelSelectionClassifier',
                         backbone=dict(DEIT['backbone'], variant='dcs')))
    path = str(tmp_path_factory.mktemp('search') / 'search.pth')
    torch.save({'state_dict': dict(search.state_dict(), cost_mu=torch.tensor(0.5)), 'meta': {}},
               path)
    return search, path


def test_a_complete_load_refuses_the_tensors_of_another_network(search_ckpt, tmp_path):
    """A DCS search checkpoint given to tools/test.py with the plain DeiT-Tiny config was
    loaded with its 61 gates, Linear_θ and cost_mu dropped without a word, and another network
    evaluated; now refused in one line — by the same rule where pytorch2onnx.py, test_onnx.py,
    the export and the analysis tools load (``load_model_checkpoint``). A model of the search's
    kind loads it with or without the search's own state (``cost_mu``: not the network's); a
    part the model has not (an auxiliary head a test config drops) is not used and passes."""
    from mmengine.runner import load_checkpoint

    from mmdcs.apis.subnet_io import load_model_checkpoint
    search, path = search_ckpt
    plain = _build(DEIT)
    trust_checkpoints(complete=True)  # tools/test.py
    with pytest.raises(MismatchedCheckpointError) as e:
        load_checkpoint(plain, path, map_location='cpu')
    msg = _one_line(e.value)
    assert msg.startswith(f'{path} does not fit the model (ImageClassifier): it holds tensors '
                          'the model does not have'), msg
    assert '0 missing, 61 unexpected, 0 mis-shaped (e.g. ' in msg, msg
    trust_checkpoints(complete=False)
    with pytest.raises(MismatchedCheckpointError) as e:  # the other tools: the same rule
        load_model_checkpoint(plain, path)
    assert _one_line(e.value) == msg
    load_model_checkpoint(search, path)  # its own kind: cost_mu is the search's state
    load_model_checkpoint(search, _save(search, str(tmp_path / 'no-mu.pth')))
    extra = str(tmp_path / 'aux.pth')
    torch.save({'state_dict': dict(plain.state_dict(), **{'aux_head.fc.weight': torch.ones(2)})},
               extra)
    load_model_checkpoint(plain, extra)


def test_the_magnitude_export_reads_a_search_checkpoint_and_refuses_another_model(
        search_ckpt, deit_ckpt, tmp_path):
    """``export_subnet.py <search config> <its search checkpoint> --method magnitude`` was
    refused ("unexpected keys ['cost_mu']"): the extra tensors a checkpoint may bring (the
    search's state) and the missing ones a baseline may lack (the architecture parameters)
    come from the model's kind; a checkpoint of another model is still refused."""
    from mmdcs.apis.export import load_baseline_checkpoint
    from mmdcs.apis.launch import UserError
    search, path = search_ckpt
    load_baseline_checkpoint(search, path)                   # the search's own checkpoint
    load_baseline_checkpoint(search, deit_ckpt)              # a baseline: no gates, no θ
    torch.manual_seed(1)
    other = _save(_build(dict(DEIT, head=_head(192, num_classes=3))),
                  str(tmp_path / 'other.pth'))
    with pytest.raises(UserError, match='does not fit the config.s model'):
        load_baseline_checkpoint(search, other)
    mobilevit = _save(_build(MOBILEVIT), str(tmp_path / 'mobilevit.pth'))
    with pytest.raises(UserError, match='does not fit the config.s model'):
        load_baseline_checkpoint(search, mobilevit)


@pytest.mark.parametrize('task,config', [('mmdet', DET_CFG), ('mmseg', SEG_CFG)])
def test_downstream_backbone_from_a_classifier_and_from_another_architecture(task, config,
                                                                            deit_ckpt, tmp_path):
    """An mmdet / mmseg config's backbone ``init_cfg``: a classifier checkpoint of its backbone
    loads (the classifier's head is not the downstream model's); a DeiT checkpoint is refused,
    the message naming the config key (no mmdcs tool is in charge here)."""
    import importlib

    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    importlib.import_module(f'{task}.utils').register_all_modules(init_default_scope=False)
    MODELS = importlib.import_module(f'{task}.registry').MODELS
    cfg = Config.fromfile(osp.join(ROOT, config))
    cfg.model.backbone.init_cfg = None
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope(task):
        model = MODELS.build(cfg.model)
    state = {f'backbone.{k}': v + 1 if v.is_floating_point() else v
             for k, v in model.backbone.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(10, 4)
    classifier = str(tmp_path / 'classifier.pth')
    torch.save({'state_dict': state, 'meta': {}}, classifier)
    for ckpt in (classifier, deit_ckpt):
        model.backbone.init_cfg = dict(type='Pretrained', checkpoint=ckpt, prefix='backbone.')
        model.backbone._is_init = False
        if ckpt == classifier:
            model.backbone.init_weights()
            assert all(torch.equal(v, state[f'backbone.{k}'])
                       for k, v in model.backbone.state_dict().items())
            continue
        with pytest.raises(MismatchedCheckpointError) as e:
            model.backbone.init_weights()
        msg = _one_line(e.value)
        assert msg.startswith(f'{deit_ckpt} does not fit {type(model.backbone).__name__}: ')
        assert f'set `{PARTIAL_KEY} = True` in the config' in msg


# ----------------------------------------------------------------------------- entry points
@pytest.mark.parametrize('tool', ['test', 'train_load_from', 'train_init_cfg'])
def test_tools_refuse_a_checkpoint_of_another_architecture(tool, deit_ckpt, tiny_digits,
                                                           tmp_path, capsys):
    """The issue's probe: a DeiT-Tiny checkpoint given to tools/test.py with the MobileViT-XS
    config exited 0 with a top-1 from random weights; the same through train.py's load_from
    and a backbone init_cfg."""
    work = str(tmp_path / 'work')
    opts = ['--cfg-options'] + digits_opts(tiny_digits)
    if tool == 'test':
        argv = ['tools/test.py', [CLS_CFG, deit_ckpt, '--work-dir', work] + opts]
    elif tool == 'train_load_from':
        argv = ['tools/train.py', [CLS_CFG, '--work-dir', work] + opts + [
            f'load_from={deit_ckpt}']]
    else:
        argv = ['tools/train.py', [CLS_CFG, '--work-dir', work] + opts + [
            'model.backbone.init_cfg.type=Pretrained', 'model.backbone.init_cfg.prefix=backbone.',
            f'model.backbone.init_cfg.checkpoint={deit_ckpt}']]
    code, err = run_main(*argv, capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith('error:')]
    assert code == 2 and len(lines) == 1 and 'Traceback' not in err, err[-3000:]
    assert f'{deit_ckpt} does not fit' in lines[0] and PARTIAL_KEY in lines[0], lines[0]
    assert not osp.exists(osp.join(work, 'epoch_1.pth'))
