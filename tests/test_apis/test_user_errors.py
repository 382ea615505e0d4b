"""Bad values in a config reach the user as one line naming the config key, exit code 2, from
every tool: the values a constructor refuses while mmengine builds the config (found by
``mmdcs.apis.launch.config_origin``), and the checks of hooks and optimizer constructors when
training starts (``mmdcs.utils.ConfigError``)."""
import functools
import glob
import os
import os.path as osp
import types

import pytest

from mmdcs.apis.launch import user_errors

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SEARCH = 'configs/demo/dcs-mobilevit-xs_search_digits.py'


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    from mmdcs.datasets.digits import build_classification
    out = tmp_path_factory.mktemp('digits_errors')
    build_classification(str(out), size=64, seed=0, max_per_class=3)
    return osp.join(str(out), 'cls')


def _one_line(proc):
    """The tool failed with exit code 2 and one ``error:`` line on stderr, no traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith('error')]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _in_process(tool, argv, capsys):
    """The tool's ``main(argv)`` in this process, as ``_one_line`` reads a finished process
    (train.py, test.py and export_subnet.py also run as processes, here and in test_tools)."""
    from _tools import run_main
    code, err = run_main(tool, argv, capsys)
    return types.SimpleNamespace(returncode=code, stderr=err)


def _data_opts(root):
    return [f'{k}.dataset.data_root={root}' for k in ('train_dataloader', 'val_dataloader',
                                                      'test_dataloader')]


@pytest.mark.parametrize('option, key', [
    # built with the model: the backbone, its gates, the classifier's search objective
    ('model.backbone.tau=-1', 'model.backbone.tau = -1'),
    ('model.cost.weight=-0.5', 'model.cost.weight = -0.5'),
    ('model.backbone.arch=mobilevit-xxl', "model.backbone.arch = 'mobilevit-xxl'"),
    # a hook (built by the runner) and the search loop (built when training starts)
    ('custom_hooks.0.start=0', 'custom_hooks.0.start = 0'),
    ('train_cfg.arch_ratio=1.5', 'train_cfg.arch_ratio = 1.5'),
])
def test_train_py_names_the_config_key(option, key, digits, tmp_path, run_tool, capsys):
    """The first value through train.py as a process (its exit code), the others through the
    same ``main`` in this process."""
    argv = [SEARCH, '--work-dir', str(tmp_path), '--cfg-options', option] + _data_opts(digits)
    if option == 'model.backbone.tau=-1':
        line = _one_line(run_tool(['tools/train.py'] + argv))
    else:
        line = _one_line(_in_process('tools/train.py', argv, capsys))
    assert line.startswith(f'error: {key}: '), line


def test_test_py_names_the_config_key(digits, tmp_path, capsys):
    ckpt = tmp_path / 'some.pth'
    ckpt.write_bytes(b'')
    proc = _in_process('tools/test.py', [SEARCH, str(ckpt), '--work-dir', str(tmp_path),
                                         '--cfg-options', 'model.backbone.variant=dcz'] +
                       _data_opts(digits), capsys)
    line = _one_line(proc)
    assert line.startswith("error: model.backbone.variant = 'dcz': "), line
    assert 'valid: baseline, dcs, kcr' in line


def test_export_subnet_names_the_config_key(tmp_path, capsys):
    ckpt = tmp_path / 'search.pth'
    ckpt.write_bytes(b'x')
    proc = _in_process('tools/export_subnet.py', [SEARCH, str(ckpt), '--out',
                                                  str(tmp_path / 'o'), '--cfg-options',
                                                  'model.cost.weight=-1'], capsys)
    line = _one_line(proc)
    assert line.startswith('error: model.cost.weight = -1: '), line


def test_analysis_tool_names_the_config_key(run_tool):
    proc = run_tool(['tools/analysis/complexity.py', SEARCH, '--cfg-options',
                     'model.regularizer.type=ibx'])
    line = _one_line(proc)
    assert line.startswith('error: model.regularizer'), line
    assert "regularizer.type must be one of" in line


def test_config_origin_without_the_key_in_the_message(monkeypatch):
    """A constructor that does not name its argument: the config part and its type; and the
    key when the message names it."""
    from collections import OrderedDict

    from mmengine.registry import MODELS, DefaultScope, Registry
    # no current default scope (an earlier test in this process may have left one, which would
    # send the build to that scope's registry)
    monkeypatch.setattr(DefaultScope, '_instance_dict', OrderedDict())
    reg = Registry('user_errors_test', parent=MODELS)

    @reg.register_module()
    class Part:
        def __init__(self, size=1, mode='a'):
            if size < 0:
                raise ValueError('negative values are not allowed')
            if mode not in ('a', 'b'):
                raise ValueError(f'mode must be a or b, got {mode!r}')

    @reg.register_module()
    class Whole:
        def __init__(self, part):
            self.part = reg.build(part)

    from mmdcs.apis import launch
    cfg = dict(model=dict(type='Whole', part=dict(type='Part', size=-1, mode='a')))
    launch._LOADED_CONFIG[0] = cfg
    for part, expected in [(dict(type='Part', size=-1), "model.part (type='Part')"),
                           (dict(type='Part', mode='c'), "model.part.mode = 'c'")]:
        cfg['model']['part'] = part
        with pytest.raises(ValueError) as e:
            reg.build(cfg['model'])
        assert launch.config_origin(e.value) == expected
    assert launch.config_origin(ValueError('not from a build')) is None


def _one_line_exit_2(capsys, fn, *args):
    with pytest.raises(SystemExit) as e:
        fn(*args)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    return lines[0]


def test_checks_when_training_starts_are_one_line(capsys):
    """RegularizerHook's t_warm check, TemperatureHook on a model without gates."""
    import torch.nn as nn
    from mmdcs.engine.hooks import RegularizerHook, TemperatureHook
    model = types.SimpleNamespace(
        reg_cfg=dict(t_warm=5, type='ib'), regularizer=object(),
        head=types.SimpleNamespace(num_classes=10), parameters=lambda: iter(()))
    runner = types.SimpleNamespace(model=model, max_epochs=5)

    def start(hook, runner):
        with user_errors():
            hook.before_train(runner)
    line = _one_line_exit_2(capsys, start, RegularizerHook(), runner)
    assert line == ('error: model.regularizer.t_warm = 5 is not below max_epochs = 5: the ib '
                    'term would never be used; set --cfg-options model.regularizer.t_warm=4 or '
                    'train_cfg.max_epochs=7')
    line = _one_line_exit_2(capsys, start, TemperatureHook(),
                            types.SimpleNamespace(model=nn.Linear(2, 2)))
    assert 'no Gumbel gates' in line


def test_other_errors_still_raise():
    with pytest.raises(ValueError, match='a bug'):
        with user_errors():
            raise ValueError('a bug')
    with pytest.raises(TypeError):
        with user_errors():
            len(3)


def _cfg_options(*items):
    """``--cfg-options`` parsed as the tools parse them (mmengine's value parsing)."""
    from mmdcs.apis.launch import ToolParser, add_cfg_options
    parser = ToolParser()
    add_cfg_options(parser)
    return parser.parse_args(['--cfg-options'] + list(items)).cfg_options


@pytest.mark.parametrize('option, expected', [
    ('model.backbone.tau=', "error: model.backbone.tau = '': the value is empty; a number is "
     'expected here'),
    ('model.backbone.tau=abc', "error: model.backbone.tau = 'abc': 'abc' is not a number; a "
     'number is expected here'),
    ('model.cost.target.flops=abc', "error: cost.target.flops = 'abc' is not a number: a flops "
     'target is a ratio'),
    ('model.cost.target.flops=', "error: cost.target.flops = '' is empty: a flops target is "
     'a ratio'),
])
def test_a_string_where_a_number_is_expected(option, expected, capsys):
    """An empty or non-numeric --cfg-options value: said to be that (was "= nan", or
    "'>' not supported between instances of 'str' and 'int'")."""
    from mmdcs.apis.subnet_io import build_model, load_task_config
    opts = _cfg_options(option)

    def build():
        with user_errors():
            cfg, scope = load_task_config(osp.join(ROOT, SEARCH), opts)
            build_model(cfg.model, scope)
    line = _one_line_exit_2(capsys, build)
    assert line.startswith(expected), line


def test_a_config_file_mmengine_cannot_read_is_one_line(tmp_path, capsys):
    """The one reader of config files (``load_config``, every tool): a Python config with a
    syntax error, broken JSON or YAML, bytes that are not UTF-8 — one line naming the file."""
    from mmdcs.apis.launch import load_config

    def load(path):
        with user_errors():
            load_config(path)

    files = {'syntax.py': b'model = dict(\n', 'broken.json': b'{"model": ',
             'broken.yaml': b'model: [1, 2\n  - x: :\n', 'bytes.py': b"a = '\xff'\n"}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        path = str(tmp_path / name)
        line = _one_line_exit_2(capsys, load, path)
        assert line.startswith(f'error: {path}: not a config mmengine can read ('), line


def test_cfg_options_without_key_value_is_one_line(capsys):
    from mmdcs.apis.launch import ToolParser, add_cfg_options
    parser = ToolParser(prog='tool.py')
    add_cfg_options(parser)
    line = _one_line_exit_2(capsys, parser.parse_args, ['--cfg-options', ''])
    assert line == ("error: argument --cfg-options: '' is not KEY=VALUE (e.g. "
                    'train_cfg.max_epochs=2; quote a value with spaces or brackets) (see '
                    'tool.py --help)')


@pytest.mark.parametrize('rank, expected', [
    (100000, 'is not below the width of any Linear_θ of mobilevit-xs (the widest is 144)'),
    (144, 'is not below the width of any Linear_θ'),
])
def test_theta_rank_that_factors_nothing_is_refused(rank, expected, capsys):
    """theta_rank ≥ every Linear_θ's width would silently be the full layer: refused, naming
    model.backbone.theta_rank and the range; a rank below the widest layer works."""
    from mmdcs.apis.subnet_io import build_model, load_task_config

    def build(rank):
        with user_errors():
            cfg, scope = load_task_config(osp.join(ROOT, SEARCH),
                                          {'model.backbone.theta_rank': rank})
            return build_model(cfg.model, scope)
    line = _one_line_exit_2(capsys, build, rank)
    assert line.startswith(f'error: model.backbone.theta_rank = {rank}: '), line
    assert expected in line and '1 ≤ theta_rank ≤ 143' in line, line
    model = build(143)  # below the widest: factored where it saves something
    ranks = {m.theta_rank for m in model.modules() if hasattr(m, 'theta_down')}
    assert 143 in ranks


# ----------------------------------------------------------------------------- numbers
NAN, INF = float('nan'), float('inf')


def _vit(**kw):
    from mmdcs.models.backbones.vit import ViT
    return ViT('deit-tiny', img_size=32, **kw)


def _with_regularizer(**reg):
    from mmdcs.models.classifiers.selection_classifier import ChannelSelectionClassifier
    return ChannelSelectionClassifier(
        backbone=dict(type='mmdcs.ViT', arch='deit-tiny', img_size=32),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=192),
        regularizer=dict(type='ib', **reg))


def _constructors():
    """(call, argument) of every kind of constructor with a number: each must refuse NaN, an
    infinity or a value out of its range, naming the argument (mmdcs.checks)."""
    from mmdcs.engine.dynamicvit_hooks import DynamicViTFreezeHook
    from mmdcs.engine.hooks import TemperatureHook
    from mmdcs.engine.ofb_hooks import OFBSearchHook
    from mmdcs.engine.search_loop import split_indices
    from mmdcs.models.backbones.mobilevit import MobileViT
    from mmdcs.models.backbones.ofb_vit import OFBViT
    from mmdcs.peers.dynamicvit import DynamicViTLoss
    from mmdcs.regularizers import IBState, KCRState, eta_ramp
    from mmdcs.selection import BinaryGumbelGate, ChannelSelector
    return [
        (lambda: _vit(gate_init=NAN), 'gate_init'),
        (lambda: _vit(variant='dcs', tau=INF), 'tau'),
        (lambda: _vit(drop_path_rate=NAN), 'drop_path_rate'),
        (lambda: _vit(attn_drop_rate=1.5), 'attn_drop_rate'),
        (lambda: MobileViT('mobilevit-xs', gate_init=-INF), 'gate_init'),
        (lambda: OFBViT('deit-s', drop_rate=INF), 'drop_rate'),
        (lambda: BinaryGumbelGate(INF), 'tau'),
        (lambda: ChannelSelector(4, gate_init=NAN), 'gate_init'),
        (lambda: _with_regularizer(eta=INF), 'regularizer.eta'),
        (lambda: _with_regularizer(t_warm=NAN), 'regularizer.t_warm'),
        (lambda: IBState(10, 8, s=INF), 's'),
        (lambda: KCRState(8, gamma=NAN), 'gamma'),
        (lambda: eta_ramp(0, 1, 0, INF), 'regularizer.ramp'),
        (lambda: TemperatureHook(start=INF), 'start'),
        (lambda: OFBSearchHook(warmup_epochs=INF), 'warmup_epochs'),
        (lambda: DynamicViTFreezeHook(fix_step=INF), 'fix_step'),
        (lambda: DynamicViTLoss(ratio_weight=INF), 'ratio_weight'),
        (lambda: split_indices(10, NAN, 0), 'arch_ratio'),
    ]


@pytest.mark.parametrize('case', range(18))
def test_constructors_refuse_nan_infinity_and_out_of_range(case):
    build, name = _constructors()[case]
    with pytest.raises(ValueError, match=rf'(?<![\w.]){name} .*must be .*, got '):
        build()


def test_numbers_the_constructors_check_are_the_shared_ones():
    from mmdcs.checks import check_number
    assert check_number(3, 'k', 1, integer=True) == 3 and check_number(0.5, 'r', 0, 1) == 0.5
    assert check_number(None, 'rank', 1, integer=True, none=True) is None
    for value, bounds in [(NAN, {}), (INF, {}), (True, {}), ('1', {}), (2.0, dict(integer=True)),
                          (0, dict(low=0, low_open=True)), (1, dict(high=1, high_open=True)),
                          (10**400, dict(high=5, integer=True))]:
        with pytest.raises(ValueError, match='^x must be '):
            check_number(value, 'x', **bounds)


def test_a_constructor_value_out_of_range_names_the_config_key(capsys):
    """Out of range where the pre-flight has no rule: the backbone refuses it while mmengine
    builds the model, one line naming the key (was: trained on)."""
    from mmdcs.apis.subnet_io import build_model, load_task_config

    def build():
        with user_errors():
            cfg, scope = load_task_config(osp.join(ROOT, SEARCH),
                                          _cfg_options('model.backbone.drop_path_rate=1.5'))
            build_model(cfg.model, scope)
    line = _one_line_exit_2(capsys, build)
    assert line == ('error: model.backbone.drop_path_rate = 1.5: MobileViT: drop_path_rate must '
                    'be a finite number in [0, 1), got 1.5'), line


# ----------------------------------------------------------------------------- the pre-flight
CLS = 'configs/demo/mobilevit-xs_digits-cls.py'


@pytest.fixture(scope='module')
def cls_config():
    from mmdcs.apis.launch import load_config, prepare_task
    cfg = load_config(osp.join(ROOT, CLS))
    return cfg, prepare_task(cfg)


@pytest.mark.parametrize('option, mode, expected', [
    # NaN / infinity anywhere (every tool that loads a config)
    ('model.backbone.gate_init=nan', None, 'model.backbone.gate_init = nan: not a finite number'),
    ('model.regularizer.eta=inf', None, 'model.regularizer.eta = inf: not a finite number'),
    ('model.backbone.drop_path_rate=nan', None, 'drop_path_rate = nan: not a finite number'),
    # a misspelt top-level key, with the one meant
    ('train_cfgg.max_epochs=1', None, "unknown top-level key 'train_cfgg': nothing reads it (did "
     "you mean 'train_cfg'?"),
    # the runner's numbers
    ('train_cfg.max_epochs=abc', 'train', "train_cfg.max_epochs = 'abc': must be an integer ≥ 1"),
    ('train_dataloader.batch_size=0', 'train', 'train_dataloader.batch_size = 0: must be an '
     'integer ≥ 1'),
    ('optim_wrapper.optimizer.lr=-1', 'train', 'optim_wrapper.optimizer.lr = -1: must be a finite '
     'number ≥ 0'),
    ('test_dataloader.num_workers=-2', 'test', 'test_dataloader.num_workers = -2: must be an '
     'integer ≥ 0'),
    # every registry type of what the run builds
    ('optim_wrapper.optimizer.type=AdamWW', 'train', "optim_wrapper.optimizer.type = 'AdamWW': "
     'not a registered optimizer (default scope mmpretrain). Close matches: mmengine.AdamW'),
    ('param_scheduler.0.type=CosineAnnealingLRR', 'train', "param_scheduler.0.type = "
     "'CosineAnnealingLRR': not a registered parameter scheduler"),
    ('train_dataloader.dataset.pipeline.0.type=LoadImageFromFil', 'train',
     "train_dataloader.dataset.pipeline.0.type = 'LoadImageFromFil': not a registered transform"),
    ('test_dataloader.dataset.type=CustomDatasett', 'test', "test_dataloader.dataset.type = "
     "'CustomDatasett': not a registered dataset"),
    ('default_hooks.checkpoint.type=CheckpointHok', 'test', "default_hooks.checkpoint.type = "
     "'CheckpointHok': not a registered hook"),
])
def test_the_config_preflight_refuses_in_one_line(option, mode, expected, cls_config):
    import copy

    from mmdcs.apis.launch import UserError, check_config
    cfg, scope = cls_config
    cfg = copy.deepcopy(cfg)
    cfg.merge_from_dict(_cfg_options(option))
    with pytest.raises(UserError) as e:
        check_config(cfg, scope, mode)
    assert str(e.value).startswith('config: ') and expected in str(e.value), str(e.value)
    assert '\n' not in str(e.value)


def test_the_preflight_checks_what_the_run_builds(cls_config):
    """A test run does not build the optimizer nor a training run the test loader: a problem
    there is not the run's."""
    import copy

    from mmdcs.apis.launch import check_config
    cfg, scope = cls_config
    cfg = copy.deepcopy(cfg)
    cfg.merge_from_dict(_cfg_options('optim_wrapper.optimizer.type=AdamWW',
                                     'test_dataloader.batch_size=0', 'my_crop_size=48'))
    check_config(cfg, scope, None)  # a helper variable unlike any known key is the config's own
    with pytest.raises(Exception, match='AdamWW'):
        check_config(cfg, scope, 'train')
    with pytest.raises(Exception, match='test_dataloader.batch_size'):
        check_config(cfg, scope, 'test')


@functools.lru_cache(maxsize=None)
def _metafile(path):
    from mmengine.fileio import load
    return load(path)


@pytest.mark.parametrize('folder', sorted(d for d in os.listdir(osp.join(ROOT, 'configs'))
                                          if d != '_base_'))
def test_every_config_passes_the_preflight(folder, monkeypatch):
    """Every config of the repository, in every mode: no false refusal (its top-level keys,
    numbers and types)."""
    import mmengine.config.utils as config_utils

    from mmdcs.apis.launch import check_config, load_config, prepare_task
    # a config with a package's base (``mmdet::...``) reads the package's 100 metafiles each
    # time: read once here
    monkeypatch.setattr(config_utils, 'load', _metafile)
    names = sorted(glob.glob(osp.join(ROOT, 'configs', folder, '*.py')))
    assert names
    for name in names:
        cfg = load_config(name)
        scope = prepare_task(cfg)
        for mode in (None, 'train', 'test'):
            check_config(cfg, scope, mode)


# ----------------------------------------------------------------------------- resume
def test_resume_refuses_the_optimizer_state_of_another_run():
    """--resume of another run's checkpoint: its optimizer state is refused in one line before
    it is loaded (was: AdamW's state loaded into an SGD, KeyError 'momentum' at the first step;
    an assertion inside OptimWrapperDict for a search)."""
    import torch
    from mmengine.optim import OptimWrapper, OptimWrapperDict

    import mmdcs.registry  # noqa: F401 (applies mmdcs's patches of mmengine)
    from mmdcs.utils import ConfigError
    model = torch.nn.Linear(2, 2)

    def wrapper(kind, params=None, **kw):
        return OptimWrapper(kind(params or model.parameters(), lr=1e-3, **kw))

    adamw, sgd = wrapper(torch.optim.AdamW), wrapper(torch.optim.SGD, momentum=0.9)
    with pytest.raises(ConfigError, match='another optimizer type .*momentum.*SGD needs'):
        sgd.load_state_dict(adamw.state_dict())
    grouped = wrapper(torch.optim.AdamW, [{'params': [model.weight]}, {'params': [model.bias]}])
    with pytest.raises(ConfigError, match=r'another model .*1 groups of \[2\] parameters; this '
                                          r'run has 2 of \[1, 1\]'):
        grouped.load_state_dict(adamw.state_dict())
    search = OptimWrapperDict(weight=wrapper(torch.optim.AdamW), arch=wrapper(torch.optim.AdamW))
    with pytest.raises(ConfigError, match=r"one optimizer's state; this run has the optimizers "
                                          r"\['arch', 'weight'\]"):
        search.load_state_dict(adamw.state_dict())
    with pytest.raises(ConfigError, match='another optimizer type'):
        search.load_state_dict(dict(weight=adamw.state_dict(), arch=sgd.state_dict()))
    state = adamw.state_dict()
    wrapper(torch.optim.AdamW).load_state_dict(state)  # this run's own state loads
    search.load_state_dict(dict(weight=state, arch=state))
