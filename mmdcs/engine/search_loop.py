"""The alternating search of DCS/KCR as an mmengine training loop (method.md §4; DCS paper Alg. 1).

Every epoch, a fixed, seeded 70% of the training data updates the network weights W
(cross-entropy) and the other 30% updates the architecture parameters α (cross-entropy +
λ·log cost(α)), each with its own optimizer (``optim_wrapper`` built by
:class:`~mmdcs.engine.optimizers.SearchOptimWrapperConstructor`). The two kinds of steps are
interleaved evenly through the epoch; a step of one kind leaves the other group's parameters
bit-identical (all gradients are cleared before each step and only that group's optimizer
steps).

Works with DDP (the wrapped model's forward is called, so gradients are all-reduced as usual),
with ``--amp`` (each wrapper's ``optim_context``) and with ``--resume`` (epoch/iteration are
restored by the runner; the split is recomputed from the seed).

Progress: an epoch is every step of both kinds. The loop's ``dataloader`` (what the runner's
``train_dataloader`` and mmengine's log line, ETA, ``end_of_epoch`` checks and iteration-based
schedulers see) is a :class:`SearchEpochLoader` whose length is that number, so the log reads
``Epoch(train) [1][13/13]``, not ``[13/9]``.

Resuming from a checkpoint saved in the middle of an epoch (``CheckpointHook(by_epoch=False)``)
continues where it stopped: the steps of that epoch already done (the checkpoint's iteration
minus the completed epochs' steps) are skipped — their batches are drawn and dropped, so the
samplers' order (seeded per epoch) and every later step are those of the uninterrupted run.
The streaming statistics of an IB/KCR term restart with the resumed epoch (as after any resume).

A budget (``cost.target``, method.md §11): before every step the loop tells the model how much
of the search is done (``search_progress`` = iteration / max iterations, from the runner's
counter, so the same on every rank and after a resume): the target is lowered over the first
part of the search. After the last step of the last epoch, before the epoch-end hooks (the
checkpoint, the validation), the model is projected onto the budget
(``ChannelSelectionClassifier.project_to_budget``): the deployed network {α > 0} of the saved
checkpoint meets the budget whatever the run length.
"""
import copy
import logging
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.dist import broadcast
from mmengine.logging import print_log
from mmengine.optim import OptimWrapperDict
from mmengine.runner import EpochBasedTrainLoop
from torch.utils.data import DataLoader, Subset

from mmdcs.checks import check_number
from mmdcs.registry import LOOPS
from .utils import unwrap_model

STEP_KINDS = ('weight', 'arch')


def split_indices(n: int, arch_ratio: float, seed: int) -> Tuple[List[int], List[int]]:
    """A fixed, seeded split of ``range(n)`` into (weight indices, architecture indices)."""
    check_number(arch_ratio, 'arch_ratio', 0, 1, low_open=True, high_open=True)
    n_arch = int(round(arch_ratio * n))
    if n_arch < 1 or n - n_arch < 1:
        raise ValueError(f'the search needs data for both steps: {n} samples with arch_ratio '
                         f'{arch_ratio} gives {n - n_arch} weight / {n_arch} architecture samples')
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[n_arch:]), sorted(perm[:n_arch])


def interleave(n_weight: int, n_arch: int) -> List[str]:
    """The order of the steps of one epoch: all batches of both loaders, the architecture steps
    spread evenly among the weight steps."""
    total = n_weight + n_arch
    order = []
    for k in range(total):
        arch_due = (k + 1) * n_arch // total - k * n_arch // total
        order.append('arch' if arch_due else 'weight')
    return order


class SearchEpochLoader:
    """The two dataloaders of the search as one epoch: ``len()`` is the number of steps of both
    kinds; iterating yields every batch in the order of :func:`interleave` (:meth:`steps` also
    says which kind each is). Other attributes (``sampler``, ``dataset``, ``batch_size`` ...)
    are the weight loader's, as before, for mmengine's hooks."""

    def __init__(self, weight: DataLoader, arch: DataLoader):
        self.weight = weight
        self.arch = arch

    def __len__(self) -> int:
        return len(self.weight) + len(self.arch)

    def order(self) -> List[str]:
        return interleave(len(self.weight), len(self.arch))

    def steps(self):
        """(kind, batch) of every step of one epoch."""
        iters = {'weight': iter(self.weight), 'arch': iter(self.arch)}
        for kind in self.order():
            yield kind, next(iters[kind])

    def __iter__(self):
        return (batch for _, batch in self.steps())

    def __getattr__(self, name):
        if name in ('weight', 'arch'):  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.weight, name)


def _progress(loop) -> Optional[float]:
    it, total = getattr(loop, '_iter', None), getattr(loop, '_max_iters', None)
    if it is None or not total:
        return None
    return min(1., it / total)


@LOOPS.register_module()
class AlternatingSearchLoop(EpochBasedTrainLoop):
    """Epoch-based loop of the search: weight steps on one part of the data, architecture steps
    on the other.

    Args:
        runner: the runner.
        dataloader: the training dataloader config (its dataset is split).
        max_epochs: search epochs.
        arch_ratio: share of the training data for the architecture steps (0.3 in the papers).
        split_seed: seed of the fixed split.
        val_begin, val_interval, dynamic_intervals: as ``EpochBasedTrainLoop``.
    """

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_epochs: int,
                 arch_ratio: float = 0.3, split_seed: int = 0, val_begin: int = 1,
                 val_interval: int = 1, dynamic_intervals=None) -> None:
        if not isinstance(dataloader, dict):
            raise TypeError('AlternatingSearchLoop builds its two dataloaders from the '
                            'train_dataloader config; got a built DataLoader')
        self.arch_ratio = arch_ratio
        self.split_seed = split_seed
        weight_loader, self.arch_dataloader, self.full_dataset = self._build_loaders(
            runner, dataloader)
        super().__init__(runner, weight_loader, max_epochs, val_begin, val_interval,
                         dynamic_intervals)
        if hasattr(self.full_dataset, 'metainfo'):
            self.runner.visualizer.dataset_meta = self.full_dataset.metainfo
        self.weight_dataloader = self.dataloader
        #: both kinds of steps as one epoch (its length is the log's denominator)
        self.dataloader = SearchEpochLoader(self.weight_dataloader, self.arch_dataloader)
        self.steps_per_epoch = len(self.dataloader)
        self._max_iters = self._max_epochs * self.steps_per_epoch

    def _build_loaders(self, runner, dataloader_cfg: dict):
        from mmengine.registry import DATASETS
        cfg = copy.deepcopy(dataloader_cfg)
        dataset_cfg = cfg.pop('dataset')
        dataset = DATASETS.build(dataset_cfg) if isinstance(dataset_cfg, dict) else dataset_cfg
        if hasattr(dataset, 'full_init'):
            dataset.full_init()
        weight_idx, arch_idx = split_indices(len(dataset), self.arch_ratio, self.split_seed)
        seed = runner.seed
        diff_rank_seed = runner._randomness_cfg.get('diff_rank_seed', False)
        loaders = []
        for idx in (weight_idx, arch_idx):
            loaders.append(runner.build_dataloader(
                dict(copy.deepcopy(cfg), dataset=Subset(dataset, idx)), seed=seed,
                diff_rank_seed=diff_rank_seed))
        print_log(f'search split (seed {self.split_seed}): {len(weight_idx)} images for the '
                  f'weights, {len(arch_idx)} for the architecture', logger='current',
                  level=logging.INFO)
        return loaders[0], loaders[1], dataset

    @property
    def model(self):
        model = self.runner.model
        return unwrap_model(model)

    def run(self) -> torch.nn.Module:
        ow = self.runner.optim_wrapper
        if not isinstance(ow, OptimWrapperDict) or set(ow.keys()) != set(STEP_KINDS):
            raise TypeError('AlternatingSearchLoop needs optim_wrapper with two optimizers, '
                            "'weight' and 'arch' (constructor='mmdcs.SearchOptimWrapperConstructor')")
        if getattr(self.model, 'cost_cfg', None) is None:
            raise TypeError('AlternatingSearchLoop needs a model with a search objective '
                            "(type='mmdcs.ChannelSelectionClassifier' with cost=dict(...))")
        return super().run()

    def run_epoch(self) -> None:
        self.runner.call_hook('before_train_epoch')
        self.runner.model.train()
        sampler = getattr(self.arch_dataloader, 'sampler', None)
        if hasattr(sampler, 'set_epoch'):
            sampler.set_epoch(self._epoch)
        done = self._iter - self._epoch * self.steps_per_epoch
        if not 0 <= done < self.steps_per_epoch:
            if done:
                print_log(f'resume: iteration {self._iter} is not in epoch {self._epoch + 1} '
                          f'({self.steps_per_epoch} steps per epoch: a different dataset or '
                          'batch size?); running the whole epoch', logger='current',
                          level=logging.WARNING)
            done = 0
        elif done:
            print_log(f'resume: skipping the {done} steps of epoch {self._epoch + 1} done before '
                      f'the checkpoint (their batches are drawn and dropped)', logger='current',
                      level=logging.WARNING)
        for idx, (kind, data_batch) in enumerate(self.dataloader.steps()):
            if idx < done:
                continue
            self.run_iter(idx, data_batch, kind)
        if self._epoch + 1 >= self._max_epochs:
            self.end_search()
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1

    def run_iter(self, idx, data_batch: Sequence[dict], kind: str = 'weight') -> None:
        self.runner.call_hook('before_train_iter', batch_idx=idx, data_batch=data_batch)
        outputs = self.train_step(data_batch, kind)
        self.runner.call_hook('after_train_iter', batch_idx=idx, data_batch=data_batch,
                              outputs=outputs)
        self._iter += 1

    def progress(self) -> Optional[float]:
        """The share of the search done before the current step (iteration / max iterations);
        None for a loop that has no iteration counter (a step run outside ``run``)."""
        return _progress(self)

    def end_search(self) -> None:
        """After the last step: a model with a budget that asks for it (``cost.target.project``,
        the default) is projected onto the budget; the architecture parameters are then
        broadcast from rank 0 (they are equal on every rank already: DDP averages their
        gradients and the projection is deterministic); the deployed ratio before and after
        is logged (``arch_cost_ratio_kept`` becomes the final one)."""
        module = self.model
        target = (getattr(module, 'cost_cfg', None) or {}).get('target')
        if not target or not target.get('project'):
            return
        rep = module.project_to_budget()
        for p in module.arch_parameters():
            broadcast(p.data, 0)
        print_log(f"budget: the search ends on the {target['resource']} budget: deployed "
                  f"{rep['before_ratio']:.4f} -> {rep['after_ratio']:.4f} of the baseline "
                  f"(target {rep['target']}; {rep['flipped']} gates moved across 0)",
                  logger='current', level=logging.INFO)
        scalars = {'arch_cost_ratio_kept': rep['after_ratio'],
                   'budget_ratio_before_projection': rep['before_ratio'],
                   'budget_gates_moved': float(rep['flipped'])}
        runner = self.runner
        for k, v in scalars.items():
            runner.message_hub.update_scalar(f'train/{k}', v)
        runner.visualizer.add_scalars(scalars, step=self._iter)

    def train_step(self, data: dict, kind: str) -> Dict[str, torch.Tensor]:
        """One step of ``kind`` ('weight' or 'arch'); returns the logged values (the
        architecture step's prefixed with ``arch_``)."""
        model, module = self.runner.model, self.model
        optim_wrappers = self.runner.optim_wrapper
        wrapper = optim_wrappers[kind]
        for w in optim_wrappers.values():
            w.zero_grad()
        module.step_kind = kind
        module.search_progress = _progress(self)
        try:
            with wrapper.optim_context(model):
                data = module.data_preprocessor(data, True)
                losses = model(**data, mode='loss')
            parsed, log_vars = module.parse_losses(losses)
            wrapper.update_params(parsed)
        finally:
            module.step_kind = None
        if kind == 'arch':
            log_vars = {f'arch_{k}': v for k, v in log_vars.items()}
        return log_vars
