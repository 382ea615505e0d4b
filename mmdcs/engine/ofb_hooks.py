"""The OFB search in an mmengine run: the hook that drives it and the optimizer constructor.

:class:`OFBSearchHook` only moves state between the runner and
:class:`~mmdcs.models.classifiers.ofb_classifier.OFBClassifier` (the public code's
``search_one_epoch``):

* before every iteration: ``w_p`` (0.99 → 0.1) and PMIM's kept share (0.95 → 0.75), linear over
  the warm-up epochs in fractional epochs;
* after every ΔT-th iteration of an epoch (ΔT = iterations per epoch // 3 by default): one
  pruning step, with the optimizer state of the sliced parameters sliced too; when every group
  has one cell left the search is over (the classifier freezes its decoder);
* it keeps no state of its own: the search state (active cells, w_p, sliced shapes, PMIM share,
  whether the search is over) is in the model's buffers and parameters, so a checkpoint holds
  it, and a resumed run (``--resume``) rebuilds the sliced shapes while loading the model
  (``OFBClassifier._load_from_state_dict``), before the optimizer state is loaded.

:class:`OFBOptimWrapperConstructor` builds the public code's three AdamW optimizers as one
optimizer with three kinds of parameter groups (stepped on the same batch): the weights (with S),
the architecture parameters α (β = (0.5, 0.999), weight decay 1e-3) and the PMIM decoder.
"""
from typing import Optional, Union

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper

from mmdcs.checks import check_number
from mmdcs.peers.ofb import linear_schedule
from mmdcs.registry import HOOKS, OPTIM_WRAPPER_CONSTRUCTORS
from mmdcs.utils.errors import ConfigError
from .utils import unwrap_model


@HOOKS.register_module()
class OFBSearchHook(Hook):
    """Schedules and periodic pruning of the OFB search.

    Args:
        warmup_epochs: epochs over which w_p and the kept share move linearly (20 in the public
            code; the demo scales it to its length).
        w_p: (start, end) of the importance-score weight in the bi-mask (0.99, 0.1).
        keep_ratio: (start, end) of the share of unmasked patches of PMIM (0.95, 0.75).
        interval: ΔT, iterations between pruning steps; ``'auto'`` = iterations per epoch // 3
            (three times per epoch, counted within the epoch, as the public code).
        threshold: η: a cell is dropped when p ≤ η / (active cells of its group) (0.2).
    """
    priority = 'ABOVE_NORMAL'

    def __init__(self, warmup_epochs: float = 20, w_p=(0.99, 0.1), keep_ratio=(0.95, 0.75),
                 interval: Union[int, str] = 'auto', threshold: float = 0.2):
        self.warmup_epochs = check_number(warmup_epochs, 'OFBSearchHook: warmup_epochs', 0)
        for name, pair, low_open in (('w_p', w_p, False), ('keep_ratio', keep_ratio, True)):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f'OFBSearchHook: {name} must be (start, end), got {pair!r}')
            for v in pair:
                check_number(v, f'OFBSearchHook: {name} (start, end)', 0, 1, low_open=low_open)
        if interval != 'auto':
            check_number(interval, "OFBSearchHook: interval ('auto' or)", 1, integer=True)
        check_number(threshold, 'OFBSearchHook: threshold', 0, 1, low_open=True, high_open=True)
        self.w_p = tuple(float(v) for v in w_p)
        self.keep_ratio = tuple(float(v) for v in keep_ratio)
        self.interval = interval
        self.threshold = float(threshold)
        self._interval: Optional[int] = None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _model(runner):
        model = unwrap_model(runner.model)
        if getattr(model, 'search_cfg', None) is None or not hasattr(model, 'compress'):
            raise ConfigError("OFBSearchHook needs type='mmdcs.OFBClassifier' with "
                             'search=dict(...) and a supernet backbone')
        return model

    def interval_for(self, iters_per_epoch: int, accumulate: int = 1) -> int:
        """ΔT: ``'auto'`` = iters // 3, a multiple of the gradient accumulation."""
        if self.interval != 'auto':
            return int(self.interval)
        step = max(1, iters_per_epoch // 3 // max(1, accumulate)) * max(1, accumulate)
        return max(1, step)

    def schedule_at(self, progress: float):
        """(w_p, kept share) at ``progress`` epochs."""
        return (linear_schedule(progress, self.warmup_epochs, *self.w_p),
                linear_schedule(progress, self.warmup_epochs, *self.keep_ratio))

    # ------------------------------------------------------------------ hooks
    def before_train(self, runner) -> None:
        model = self._model(runner)
        loader = runner.train_loop.dataloader
        accumulate = getattr(runner.optim_wrapper, '_accumulative_counts', 1)
        self._interval = self.interval_for(len(loader), accumulate)
        if bool(model.search_done):
            model.end_search()  # a run resumed after the search: decoder frozen, augments on
        print_log(f'OFB search: prune every {self._interval} iterations (threshold '
                  f'{self.threshold}), w_p {self.w_p[0]} -> {self.w_p[1]} and PMIM kept share '
                  f'{self.keep_ratio[0]} -> {self.keep_ratio[1]} over {self.warmup_epochs:g} '
                  f'epochs; search {"over" if bool(model.search_done) else "running"}',
                  logger='current')

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        model = self._model(runner)
        progress = runner.epoch + batch_idx / max(1, len(runner.train_loop.dataloader))
        w_p, keep = self.schedule_at(progress)
        if model.searching:
            model.set_schedule_(w_p=w_p, keep_ratio=keep)
        runner.message_hub.update_scalar('train/w_p', w_p)
        runner.message_hub.update_scalar('train/keep_ratio', float(model.keep_ratio))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        model = self._model(runner)
        if not model.searching or (batch_idx + 1) % self._interval:
            return
        report = model.compress(self.threshold, runner.optim_wrapper)
        if report['changed']:
            state = model.backbone.search_state()
            gflops = float(model.expected_macs().detach()) / 1e9
            print_log(f'OFB prune at epoch {runner.epoch + 1} iter {batch_idx + 1}: '
                      f'{int(state["groups_finished"])}/{int(state["groups"])} groups finished, '
                      f'{int(state["active_cells"])} cells active, {gflops:.4g} GFLOPs '
                      f'(target {model._target / 1e9:.4g})', logger='current')
            for k, v in dict(state, gflops=gflops).items():
                runner.message_hub.update_scalar(f'train/ofb_{k}', v)
            if is_model_wrapper(runner.model):
                # the DDP reducer holds the old parameter sizes: wrap the model again
                runner.model = runner.wrap_model(runner.cfg.get('model_wrapper_cfg'), model)
        if report['finished']:
            print_log(f'OFB search finished at epoch {runner.epoch + 1} iter {batch_idx + 1}',
                      logger='current')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class OFBOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """One optimizer, three kinds of parameter groups (the public code's three AdamW):

    * weights (everything else, the importance scores S included, as the public code): the
      ``optimizer`` config and the default constructor's ``paramwise_cfg`` options;
    * architecture parameters α (``*.bimask.alpha``): ``paramwise_cfg['arch']`` (default
      ``dict(betas=(0.5, 0.999), weight_decay=1e-3)``; the lr of ``optimizer``, × ``lr_mult``,
      or its own ``lr``; the param schedulers scale it like the others);
    * the PMIM decoder (``decoder.*``): ``paramwise_cfg['decoder']`` (default: as the weights).

    Scores S and α never get weight decay from the weights' settings (the public code puts
    ``score`` in its no-decay list).
    """
    GROUP_KEYS = ('lr', 'lr_mult', 'betas', 'weight_decay', 'eps')

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: Optional[dict] = None):
        paramwise_cfg = dict(paramwise_cfg or {})
        self.arch_cfg = self._group_cfg(paramwise_cfg.pop('arch', None),
                                        dict(betas=(0.5, 0.999), weight_decay=1e-3), 'arch')
        self.decoder_cfg = self._group_cfg(paramwise_cfg.pop('decoder', None), {}, 'decoder')
        custom = dict(paramwise_cfg.get('custom_keys', {}))
        if optim_wrapper_cfg.get('optimizer', {}).get('weight_decay') is not None:
            custom.setdefault('bimask.score', dict(decay_mult=0.))
        custom.setdefault('bimask.alpha', dict())  # one group per α (set in __call__)
        paramwise_cfg['custom_keys'] = custom
        super().__init__(optim_wrapper_cfg, paramwise_cfg)

    def _group_cfg(self, cfg, default: dict, name: str) -> dict:
        cfg = dict(default if cfg is None else cfg)
        unknown = set(cfg) - set(self.GROUP_KEYS)
        if unknown:
            raise ValueError(f'paramwise_cfg.{name}: unknown keys {sorted(unknown)}; valid: '
                             f'{", ".join(self.GROUP_KEYS)}')
        if 'lr' in cfg and 'lr_mult' in cfg:
            raise ValueError(f'paramwise_cfg.{name}: give lr or lr_mult, not both')
        for k in ('lr', 'lr_mult', 'weight_decay'):
            if k in cfg:
                check_number(cfg[k], f'paramwise_cfg.{name}.{k}', 0)
        return cfg

    def __call__(self, model) -> OptimWrapper:
        module = unwrap_model(model)
        wrapper = super().__call__(module)
        names = {id(p): n for n, p in module.named_parameters()}
        base_lr = self.optimizer_cfg.get('lr')
        n_arch = 0
        for group in wrapper.optimizer.param_groups:
            params = group['params']
            kinds = {self._kind(names.get(id(p), '')) for p in params}
            if len(kinds) != 1 or 'weight' in kinds:
                continue
            kind = kinds.pop()
            cfg = self.arch_cfg if kind == 'arch' else self.decoder_cfg
            n_arch += kind == 'arch'
            for k, v in cfg.items():
                if k == 'lr_mult':
                    group['lr'] = base_lr * v
                elif k == 'lr':
                    group['lr'] = float(v)
                else:
                    group[k] = tuple(v) if k == 'betas' else v
            group['ofb_group'] = kind
        if n_arch == 0:
            raise ConfigError('OFBOptimWrapperConstructor found no architecture parameters '
                             '(*.bimask.alpha): use an OFB supernet backbone, or the default '
                             'constructor for a compact network')
        return wrapper

    @staticmethod
    def _kind(name: str) -> str:
        if name.endswith('bimask.alpha'):
            return 'arch'
        if name.startswith('decoder.'):
            return 'decoder'
        return 'weight'
