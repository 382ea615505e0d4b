"""Hooks: they only move state between the runner and the method's objects.

* :class:`TemperatureHook` sets τ on every gate (method.md §5).
* :class:`RegularizerHook` drives the IB/KCR state of a ``ChannelSelectionClassifier``
  (method.md §6, §7): epoch start/end, the ``t_warm`` switch, the reports, checkpoints.
"""
import math
from typing import Dict, Optional

from mmengine.hooks import Hook

from mmdcs.checks import check_number
from mmdcs.registry import HOOKS
from mmdcs.regularizers import eta_ramp
from mmdcs.selection import gates, set_temperature
from mmdcs.utils.errors import ConfigError
from .utils import unwrap_model

CHECKPOINT_KEY = 'mmdcs_regularizer'


def _log_scalars(runner, scalars: Dict[str, float], step: int, prefix: str) -> None:
    """To the message hub (the training log) and the visualizer (vis_data/scalars.json)."""
    for k, v in scalars.items():
        runner.message_hub.update_scalar(f'train/{prefix}{k}', v)
    runner.visualizer.add_scalars({f'{prefix}{k}': v for k, v in scalars.items()}, step=step)


@HOOKS.register_module()
class TemperatureHook(Hook):
    """τ = start · factor^t on every gate of the model, t = epoch (``by='epoch'``) or iteration
    (``by='iter'``, for ``IterBasedTrainLoop``: the per-iteration factor is ``iter_factor`` or
    factor^(1/iterations per epoch), so both modes reach the same τ at epoch boundaries).

    τ is a buffer of each gate, so it is saved in checkpoints; it is a function of the
    epoch/iteration, so a resumed run continues the same schedule.

    Args:
        start: τ0 (4.5 in the papers).
        factor: decay per epoch, in (0, 1] (0.95 in the papers).
        by: 'epoch' or 'iter'.
        iter_factor: decay per iteration (``by='iter'``); default from ``factor``.
        min_tau: optional floor.
    """
    priority = 'ABOVE_NORMAL'

    def __init__(self, start: float = 4.5, factor: float = 0.95, by: str = 'epoch',
                 iter_factor: Optional[float] = None, min_tau: Optional[float] = None):
        start = check_number(start, 'TemperatureHook: start (τ0)', 0, low_open=True)
        factor = check_number(factor, 'TemperatureHook: factor', 0, 1, low_open=True)
        if by not in ('epoch', 'iter'):
            raise ValueError(f"TemperatureHook: by must be 'epoch' or 'iter', got {by!r}")
        iter_factor = check_number(iter_factor, 'TemperatureHook: iter_factor', 0, 1,
                                   low_open=True, none=True)
        min_tau = check_number(min_tau, f'TemperatureHook: min_tau (≤ start = {start})', 0,
                               start, low_open=True, none=True)
        self.start, self.factor, self.by = start, factor, by
        self.iter_factor, self.min_tau = iter_factor, min_tau

    def tau_at(self, epoch: int = 0, iteration: int = 0, iters_per_epoch: int = 1) -> float:
        if self.by == 'epoch':
            tau = self.start * self.factor**epoch
        else:
            f = self.iter_factor or self.factor**(1.0 / max(1, iters_per_epoch))
            tau = self.start * f**iteration
        return max(tau, self.min_tau) if self.min_tau else tau

    def _iters_per_epoch(self, runner) -> int:
        loop = runner.train_loop
        return getattr(loop, 'steps_per_epoch', None) or len(loop.dataloader)

    def _set(self, runner, tau: float) -> None:
        n = set_temperature(unwrap_model(runner.model), tau)
        if n == 0:
            raise RuntimeError('TemperatureHook: the model has no gates (a baseline backbone?)')
        runner.message_hub.update_scalar('train/tau', tau)

    def before_train(self, runner) -> None:
        if not any(True for _ in gates(unwrap_model(runner.model))):
            raise ConfigError('TemperatureHook: the model has no Gumbel gates to set (a baseline '
                             'backbone, or a KCR subnet): remove the hook or use a DCS/KCR '
                             'supernet')

    def before_train_epoch(self, runner) -> None:
        if self.by == 'epoch':
            self._set(runner, self.tau_at(epoch=runner.epoch))

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if self.by == 'iter':
            self._set(runner, self.tau_at(iteration=runner.iter,
                                          iters_per_epoch=self._iters_per_epoch(runner)))


@HOOKS.register_module()
class RegularizerHook(Hook):
    """Drives the IB or KCR state of a ``ChannelSelectionClassifier`` (``regularizer=...``).

    * before training: checks (``t_warm`` < max epochs, the head's number of classes equals the
      dataset's), moves the state to the model's device;
    * each epoch: resets the streaming sums, switches the term on when epoch ≥ ``t_warm``
      (epochs counted from 0, so the paper's "t > t_warm" with t from 1);
    * each iteration: the share of η in force, rising from 0 to 1 over ``ramp`` epochs after
      ``t_warm`` (``model.reg_scale``; ``ramp = 0``: the papers' step);
    * epoch end: all-reduces and refreshes the state (Q(a|y) and centroids, or V_r), logs the
      reports (IB: exact IB(W), I(X̃;X), I(X̃;Y); KCR: TNN, KC);
    * checkpoints: saves the state under ``checkpoint['mmdcs_regularizer']`` and restores it.
    """
    priority = 'NORMAL'

    def _model(self, runner):
        model = unwrap_model(runner.model)
        if getattr(model, 'regularizer', None) is None:
            raise ConfigError('RegularizerHook needs a model with a regularizer: '
                             "type='mmdcs.ChannelSelectionClassifier' with "
                             "regularizer=dict(type='ib'|'kcr', ...)")
        return model

    def before_train(self, runner) -> None:
        model = self._model(runner)
        t_warm, max_epochs = model.reg_cfg['t_warm'], runner.max_epochs
        if t_warm >= max_epochs:
            raise ConfigError(f'model.regularizer.t_warm = {t_warm} is not below max_epochs = '
                             f'{max_epochs}: the {model.reg_cfg["type"]} term would never be used; '
                             f'set --cfg-options model.regularizer.t_warm={max(max_epochs - 1, 0)}'
                             f' or train_cfg.max_epochs={t_warm + 2}')
        dataset = getattr(runner.train_loop, 'full_dataset', None) or \
            runner.train_loop.dataloader.dataset
        num_classes = getattr(model.head, 'num_classes', None)
        dataset_classes = self._num_dataset_classes(dataset)
        if None not in (num_classes, dataset_classes) and dataset_classes != num_classes:
            raise ConfigError(f'the head has num_classes = {num_classes} but the training set '
                             f'has {dataset_classes} classes: set model.head.num_classes')
        device = next(model.parameters()).device
        model.regularizer.to(device)

    @staticmethod
    def _num_dataset_classes(dataset) -> Optional[int]:
        """The classes of the dataset's metainfo, or else 1 + its largest label."""
        classes = (getattr(dataset, 'metainfo', None) or {}).get('classes', None)
        if classes is not None:
            return len(classes)
        if hasattr(dataset, 'get_gt_labels'):
            labels = dataset.get_gt_labels()
            return int(max(labels)) + 1 if len(labels) else None
        return None

    def before_train_epoch(self, runner) -> None:
        model = self._model(runner)
        model.regularizer.begin_epoch()
        model.reg_active = runner.epoch >= model.reg_cfg['t_warm']
        if model.reg_active and not model.regularizer.ready:
            # the term is computed from the state of a finished epoch (IB: Q(a|y) and the
            # feature centroids; KCR: V_r): before the first refresh it is 0 or a constant
            kind = model.reg_cfg['type']
            runner.logger.warning(
                f'the {kind} term is on from epoch {runner.epoch + 1} (model.regularizer.'
                f't_warm = {model.reg_cfg["t_warm"]}), but its state is refreshed only at the '
                'end of an epoch: in this epoch the term is 0 or a constant without gradient '
                '(it acts from the next epoch on; method.md §4.3). Use t_warm ≥ 1 and more '
                'than t_warm epochs for a term that trains.')

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        """The share of η in force at this iteration: 0 → 1 over ``ramp`` epochs from
        ``t_warm`` on (:func:`~mmdcs.regularizers.eta_ramp`; a function of the iteration, so a
        resumed run continues it). Logged as ``train/reg_eta`` (η times that share)."""
        model = self._model(runner)
        loop = runner.train_loop
        per_epoch = getattr(loop, 'steps_per_epoch', None) or len(loop.dataloader)
        cfg = model.reg_cfg
        model.reg_scale = eta_ramp(runner.iter, per_epoch, cfg['t_warm'], cfg.get('ramp', 0.))
        runner.message_hub.update_scalar('train/reg_eta', cfg['eta'] * model.reg_scale)

    def after_train_epoch(self, runner) -> None:
        model = self._model(runner)
        stats = model.regularizer.end_epoch()
        scalars = {k: v for k, v in stats.items() if isinstance(v, float) and math.isfinite(v)}
        kind = model.reg_cfg['type']
        _log_scalars(runner, scalars, runner.epoch + 1, f'{kind}_')
        shown = ', '.join(f'{k}: {v:.4g}' for k, v in scalars.items())
        runner.logger.info(f'{kind} state refreshed (epoch {runner.epoch + 1}, term '
                           f'{"on" if model.reg_active else "off"}): {shown}')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        model = self._model(runner)
        checkpoint[CHECKPOINT_KEY] = dict(type=model.reg_cfg['type'],
                                          state=model.regularizer.state_dict())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        saved = checkpoint.get(CHECKPOINT_KEY)
        if saved is None:
            return
        model = self._model(runner)
        if saved['type'] != model.reg_cfg['type']:
            raise ConfigError(f"the checkpoint holds a {saved['type']} state, the model uses "
                             f"{model.reg_cfg['type']}")
        model.regularizer.load_state_dict(saved['state'])
