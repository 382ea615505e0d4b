"""The classifier of the search and of the retraining (method.md §3, §4, §6, §7).

``ChannelSelectionClassifier`` is mmpretrain's ``ImageClassifier`` plus two optional terms:

* ``cost`` (the search): on an *architecture* step, ``loss_cost = λ·log cost(α)`` from the
  backbone's cost model (and an optional gate-entropy term), added to the cross-entropy; on a
  *weight* step only the cross-entropy (the search loop says which step it is);
* ``regularizer`` (the retraining): ``loss_ib = η·IBB_j`` (DCS; the variational part of IBB_j,
  which carries its whole gradient; the whole IBB_j of eq. 2 is logged as ``ibb``, the part that
  depends on the inputs only as ``ibb_const``, and the corrected Theorem 3.1 upper bound of IB,
  IBB_j + (1/B) Σ_i H(φ(X_i,·)), as ``ib_bound``: IB ≤ IBB is false in general) or
  ``loss_kcr = η·KCR_j`` (KCR) on the pre-logit
  features X̃, once the epoch reaches ``t_warm``. The streaming statistics
  of the bound are fed here, every training batch; ``RegularizerHook`` refreshes them at epoch
  end, switches the term on after ``t_warm``, logs the reports and saves/restores the state.
"""
from typing import Dict, List, Optional

import torch
from mmpretrain.models.classifiers import ImageClassifier
from mmpretrain.structures import DataSample

import mmdcs.models.counting  # noqa: F401  (registers the 'flops' and 'params' budgets)
from mmdcs.checks import check_number
from mmdcs.registry import MODELS
from mmdcs.regularizers import REGULARIZERS, Regularizer, build_regularizer
from mmdcs.selection import (COST_MODES, EXPECTATIONS, arch_parameters, head_selectors,
                             hidden_selectors,
                             prunable_modules)
from mmdcs.selection.budget import (BudgetError, build_cost, build_prior, counted_resources,
                                    nested_channels, resource_names, resource_options)
from mmdcs.selection.budget_search import project_to_budget, scheduled_ratio
from mmdcs.utils.scope import build_model_part, cls_data_preprocessor

STEP_KINDS = ('weight', 'arch')
#: default step ρ of the dual ascent on the budget's multiplier μ
DEFAULT_RHO = 0.05
#: default weight of the quadratic term of the augmented Lagrangian (damps the oscillation of μ)
DEFAULT_PENALTY = 10.
#: default share of the search over which the target is lowered from 1 to its value
DEFAULT_RAMP = 0.5
#: default number of epochs over which η of the retraining term rises from 0 after t_warm
#: (method.md §4.3; 0 = the papers' step)
DEFAULT_ETA_RAMP = 1.0


def _positive(name: str, value, allow_zero: bool = False) -> float:
    """A weight, step or length of the objective: a finite number > 0 (≥ 0 where
    ``allow_zero``)."""
    return check_number(value, name, 0, low_open=not allow_zero)


@MODELS.register_module()
class ChannelSelectionClassifier(ImageClassifier):
    """Image classifier for the DCS/KCR search and retraining.

    Args:
        backbone, neck, head, pretrained, train_cfg, data_preprocessor, init_cfg: as
            mmpretrain's ``ImageClassifier``. The backbone is an mmdcs backbone.
        cost: the search objective, e.g. ``dict(mode='paper', weight=0.2, entropy_weight=0.)``:
            ``mode`` 'paper' (the papers' formulas) or 'flops' (exact FLOPs), ``weight`` λ > 0,
            ``entropy_weight`` ≥ 0 on the mean binary entropy of the gates' open probability,
            ``expectation`` 'gate' (P(open) = sigmoid(α), exact at any τ; the default) or
            'paper' (the papers' sigmoid(α/τ), to reproduce them). Linear_θ of DCS counts as a
            constant of the cost. Needs a backbone with architecture parameters (a DCS/KCR
            supernet). ``target=dict(flops=0.7)`` (or ``params=``, or ``latency=`` with
            ``latency_table='table.json'`` beside ``target``: any resource of
            :func:`mmdcs.selection.budget.build_cost`, with its options): aim at that ratio of
            the baseline network's count instead of weighing λ·log cost (``weight`` and ``mode``
            then do not apply): the search minimises CE + μ·v(E[count]) with μ set
            by dual ascent (:meth:`budget_terms`, method.md §11), the budget lowered from 1 to R
            over the first part of the search, and ends on the budget
            (:meth:`project_to_budget`, called by the search loop).
        regularizer: the retraining term, ``dict(type='ib', eta=50., t_warm=90, s=1.)`` or
            ``dict(type='kcr', eta=1., t_warm=90, gamma=0.1, route='exact')`` (route
            'nystrom' with ``num_landmarks``); ``ramp`` (epochs, default 1; 0 = the papers'
            step) is how long η takes to rise from 0 after ``t_warm``, ``normalize`` (default
            True; False = the papers' raw features) whether the term sees the L2-normalised
            features (method.md §4.3, §6.8, §7.5). Other keys go to the regulariser
            (:mod:`mmdcs.regularizers`: ``IBState``, ``KCRState``, ``NystromKCR``).
    """

    #: what the model keeps of a search beside its network (the budget's multiplier μ, with a
    #: target): saved in checkpoints, not part of the network
    #: (:func:`mmdcs.selection.search_state_keys`)
    search_state_names = ('cost_mu', )

    def __init__(self, backbone: dict, neck: Optional[dict] = None, head: Optional[dict] = None,
                 cost: Optional[dict] = None, regularizer: Optional[dict] = None,
                 pretrained: Optional[str] = None, train_cfg: Optional[dict] = None,
                 data_preprocessor: Optional[dict] = None, init_cfg: Optional[dict] = None):
        # resolve every part here so the model builds under default_scope='mmdcs' as well
        super().__init__(backbone=build_model_part(backbone), neck=build_model_part(neck),
                         head=build_model_part(head), pretrained=pretrained,
                         train_cfg=train_cfg,
                         data_preprocessor=cls_data_preprocessor(data_preprocessor,
                                                                 train_cfg),
                         init_cfg=init_cfg)
        #: 'weight' or 'arch' while the search loop runs a step; None otherwise
        self.step_kind: Optional[str] = None
        #: the share of the search done, set by the search loop before every step (from the
        #: runner's iteration: the same on every rank and after a resume); None outside a search
        self.search_progress: Optional[float] = None
        self.cost_cfg = self._check_cost(cost)
        self.reg_cfg: Optional[dict] = None
        #: the IB/KCR regulariser (a plain object, not a module: DDP must not broadcast its sums)
        self.regularizer: Optional[Regularizer] = None
        #: set by RegularizerHook: whether the term is in the loss this epoch (t ≥ t_warm)
        self.reg_active = False
        #: set by RegularizerHook every iteration: the share of η in force (the ramp after
        #: t_warm, :func:`~mmdcs.regularizers.eta_ramp`); 1 outside a hook-driven run
        self.reg_scale = 1.0
        if regularizer is not None:
            self.reg_cfg, self.regularizer = self._build_regularizer(regularizer)

    # --------------------------------------------------------------------- configuration
    def _check_cost(self, cost: Optional[dict]) -> Optional[dict]:
        if cost is None:
            return None
        cost = dict(cost)
        options = {o for r in resource_names() for o in resource_options(r)}
        unknown = set(cost) - {'mode', 'weight', 'entropy_weight', 'expectation',
                               'target'} - options
        if unknown:
            raise ValueError(f'cost: unknown keys {sorted(unknown)}; valid: mode, weight, '
                             'entropy_weight, expectation, target')
        if cost.get('target') is not None:
            if 'weight' in cost or cost.get('mode', 'flops') != 'flops':
                raise ValueError('cost: a target replaces λ·log cost (the exact count is '
                                 'constrained by a multiplier); drop cost.weight / cost.mode')
            cost['mode'] = 'flops'
        cost.setdefault('mode', 'paper')
        if cost['mode'] not in COST_MODES:
            raise ValueError(f"cost.mode must be one of {COST_MODES}, got {cost['mode']!r}")
        cost.setdefault('expectation', 'gate')
        if cost['expectation'] not in EXPECTATIONS:
            raise ValueError(f'cost.expectation must be one of {EXPECTATIONS}, got '
                             f"{cost['expectation']!r}")
        cost['weight'] = _positive('cost.weight (λ)', cost.get('weight', 0.2))
        cost['entropy_weight'] = _positive('cost.entropy_weight',
                                           cost.get('entropy_weight', 0.), allow_zero=True)
        if not arch_parameters(self.backbone):
            raise ValueError(
                'a search (cost=...) needs architecture parameters, but the backbone '
                f'{type(self.backbone).__name__}'
                f'(variant={getattr(self.backbone, "variant", "?")!r})'
                ' has none: use a DCS or KCR supernet (variant dcs/kcr, no subnet)')
        self._cost_model = self.backbone.cost_model(cost['mode'], expectation=cost['expectation'],
                                                    with_theta=True)
        given = {o: cost[o] for o in options if o in cost}
        cost['target'] = self._check_target(cost.get('target'), given)
        return cost

    def _check_target(self, target: Optional[dict],
                      options: Optional[dict] = None) -> Optional[dict]:
        """``cost.target = dict(flops=R)`` (or ``params=R``; optional ``input_size`` (H, W) of
        the FLOPs, default the backbone's nominal size; ``rho`` ρ, the step of the dual ascent;
        ``penalty`` c, the quadratic term; ``ramp``, the share of the search over which the
        target is lowered from 1 to R; ``project``, whether the search ends with the projection
        onto the budget): R times the baseline network's count, calibrated against mmengine's
        count of this classifier. :class:`~mmdcs.selection.budget.BudgetError` when it cannot be
        met."""
        options = dict(options or {})
        if target is None:
            if options:
                raise ValueError(f'cost: {", ".join(sorted(options))} without a target '
                                 '(cost.target)')
            return None
        # a resource set to None is not given (how a command line's --cfg-options swaps a
        # config's flops target for another: model.cost.target.flops=None)
        target = {k: v for k, v in dict(target).items() if v is not None}
        resources = resource_names()
        known = {'input_size', 'rho', 'penalty', 'ramp', 'project'}
        unknown = set(target) - set(resources) - known
        given = [r for r in resources if r in target]
        if unknown or len(given) != 1:
            raise ValueError(f'cost.target: give exactly one of {resources} (a ratio of the '
                             f'baseline\'s count), optionally {", ".join(sorted(known))}; got '
                             f'{sorted(target)}')
        resource = given[0]
        foreign = sorted(set(options) - set(resource_options(resource)))
        if foreign:
            raise ValueError(f'cost: {", ".join(foreign)} is not an option of a {resource} '
                             'target')
        rho = _positive('cost.target.rho (ρ)', target.get('rho', DEFAULT_RHO))
        penalty = _positive('cost.target.penalty', target.get('penalty', DEFAULT_PENALTY),
                            allow_zero=True)
        ramp = _positive('cost.target.ramp', target.get('ramp', DEFAULT_RAMP), allow_zero=True)
        if ramp > 1:
            raise ValueError(f'cost.target.ramp is a share of the search in [0, 1], got {ramp}')
        project = target.get('project', True)
        if not isinstance(project, bool):
            raise ValueError(f'cost.target.project must be True or False, got {project!r}')
        size = target.get('input_size', None)
        if isinstance(size, int):
            size = (size, size)
        # the budget's cost model, by name: the exact count (flops, params), or a latency table
        linear = build_cost(resource, self, size, **options)
        # select_heads: E[kept heads] = Σ sigmoid(α) enters the count (linearly in the exact
        # counts, through the attention's measured curve in a latency table); a resource whose
        # cost has no head units (a table measured without heads is refused where it is read)
        self._head_selectors = head_selectors(self.backbone)
        if self._head_selectors and set(self._head_selectors) != set(linear.head_dims):
            raise BudgetError(f'select_heads: the {resource} budget does not cost heads (the '
                              'exact flops and params and a latency table measured with '
                              'select_heads do)')
        budget = linear.check_target(target[resource], f'cost.target.{resource}')
        self._budget = linear
        # the Lagrange multiplier μ: state of the search (saved in checkpoints, resumed)
        self.register_buffer('cost_mu', torch.zeros(()), persistent=True)
        self._selectors = {n: m.select for n, m in prunable_modules(self.backbone).items()}
        # select_hidden: the hidden gates enter the count bilinearly (E[D̃]·E[H̃])
        self._hidden_selectors = hidden_selectors(self.backbone)
        # the violation is measured in units of what the search can change (every channel kept
        # minus one per block): the same ρ and c for a backbone whose selected widths are most
        # of its count (DeiT's MLPs) and one where they are a small share (MobileViT's)
        scale = linear.ceiling - linear.floor
        return dict(resource=resource, ratio=float(target[resource]), budget=budget, rho=rho,
                    penalty=penalty, ramp=ramp, project=project, scale=scale,
                    input_size=linear.input_size)

    def _build_regularizer(self, regularizer: dict):
        cfg = dict(regularizer)
        kind = cfg.get('type', None)
        if kind not in REGULARIZERS:
            raise ValueError(f'regularizer.type must be one of {tuple(sorted(REGULARIZERS))}, '
                             f'got {kind!r}')
        eta = _positive('regularizer.eta (η)', cfg.pop('eta', REGULARIZERS[kind].default_eta))
        t_warm = check_number(cfg.pop('t_warm', 0), 'regularizer.t_warm', 0, integer=True)
        ramp = _positive('regularizer.ramp (epochs)', cfg.pop('ramp', DEFAULT_ETA_RAMP),
                         allow_zero=True)
        reg = build_regularizer(cfg, self._feature_dim(), getattr(self.head, 'num_classes', None))
        return dict(type=kind, eta=eta, t_warm=t_warm, ramp=ramp), reg

    def _feature_dim(self) -> int:
        """Width of the pre-logit features X̃ (what ``head.pre_logits`` returns): the head's
        hidden width if it has one (``hidden_dim``, ``mid_channels``), else its input width."""
        for name in ('hidden_dim', 'mid_channels', 'in_channels'):
            value = getattr(self.head, name, None)
            if isinstance(value, (list, tuple)) and value:
                value = value[-1]
            if isinstance(value, int):
                return value
        raise ValueError(f'cannot tell the feature width of head {type(self.head).__name__}')

    # --------------------------------------------------------------------- parameters
    def arch_parameters(self) -> List[torch.nn.Parameter]:
        """α: updated by the architecture optimizer only."""
        return arch_parameters(self.backbone)

    def weight_parameters(self) -> List[torch.nn.Parameter]:
        arch = {id(p) for p in self.arch_parameters()}
        return [p for p in self.parameters() if id(p) not in arch]

    # --------------------------------------------------------------------- losses
    def search_terms(self) -> Dict[str, torch.Tensor]:
        """λ·log cost(α) (+ the entropy term), and the cost itself for the logs; with a target,
        the budget term instead (:meth:`budget_terms`)."""
        if self.cost_cfg['target'] is not None:
            out = self.budget_terms()
        else:
            cost = self._cost_model.expected()
            out = {'loss_cost': self.cost_cfg['weight'] * torch.log(cost),
                   'cost': cost.detach()}
        if self.cost_cfg['entropy_weight'] > 0:
            probs = torch.cat([self._gate_of(p).probs(p, self.cost_cfg['expectation'])
                               for p in self.arch_parameters()])
            p = probs.clamp(1e-6, 1 - 1e-6)
            entropy = -(p * p.log() + (1 - p) * (1 - p).log()).mean()
            out['loss_entropy'] = self.cost_cfg['entropy_weight'] * entropy
        return out

    def scheduled_budget(self) -> float:
        """The budget of the current point of the search (``search_progress``): lowered
        linearly from the baseline (ratio 1) to the target over the first ``ramp`` of the
        search, then the target (:func:`~mmdcs.selection.budget_search.scheduled_ratio`)."""
        t = self.cost_cfg['target']
        return scheduled_ratio(t['ratio'], 1., self.search_progress,
                               t['ramp']) * self._budget.baseline

    def budget_terms(self, update: bool = True) -> Dict[str, torch.Tensor]:
        """The budget as a constraint on the expected count by a Lagrange multiplier μ
        (method of multipliers, docs/budgets.md). With v = (E[count] − budget) / (ceiling −
        floor) (E[D̃] = Σ σ(α): the count of the stochastic supernet the weights are trained
        with, smooth in α; the violation in units of the range the selection spans) the loss
        is ``μ·v + (c/2)·v²``, then μ ← μ + ρ·v (once per architecture step). While the
        target is still being lowered (the first ``ramp`` of the search) the constraint is
        E[count] ≤ budget: μ ← max(0, μ + ρ·v) and the quadratic term only above the budget;
        then it is the equality the user asked for. The deployed network ({α > 0}) is put on the
        budget at the end of the search (:meth:`project_to_budget`). Logged: ``cost_ratio``
        (expected count / baseline), ``cost_ratio_kept`` (deployed / baseline), ``cost_target``
        (the scheduled budget / baseline), ``cost_mu`` (μ before this step's update)."""
        t = self.cost_cfg['target']
        budget = self.scheduled_budget()
        ramping = budget > t['budget'] * (1 + 1e-9)
        heads = dict(heads=self._head_selectors) if self._head_selectors else {}
        expected = self._budget.expected(self._selectors, self.cost_cfg['expectation'],
                                         self._hidden_selectors, **heads)
        heads_kept = {k: max(1, int((s.alpha.detach() > 0).sum()))
                      for k, s in self._head_selectors.items()}
        kept = self._budget.at({n: int((s.alpha.detach() > 0).sum())
                                for n, s in self._selectors.items()},
                               {k: int((s.alpha.detach() > 0).sum())
                                for k, s in self._hidden_selectors.items()},
                               **(dict(heads_kept=heads_kept) if heads_kept else {}))
        violation = (expected - budget) / t['scale']
        mu = self.cost_mu.detach().clone()
        quad = violation.clamp(min=0) if ramping else violation
        out = {'loss_budget': mu * violation + 0.5 * t['penalty'] * quad**2,
               'cost_ratio': expected.detach() / self._budget.baseline,
               'cost_ratio_kept': expected.new_tensor(kept / self._budget.baseline),
               'cost_target': expected.new_tensor(budget / self._budget.baseline),
               'cost_mu': mu}
        if t['resource'] not in counted_resources():  # e.g. latency_ratio_kept: predicted
            out[f'{t["resource"]}_ratio_kept'] = out['cost_ratio_kept']
        if update and self.training:
            self.cost_mu.add_(t['rho'] * violation.detach())
            if ramping:
                self.cost_mu.clamp_(min=0)
        return out

    @torch.no_grad()
    def project_to_budget(self) -> dict:
        """The end of a search with a target: the channels (and hidden units) ranked jointly by
        σ(α) per unit of marginal cost, the least valuable dropped until the deployed count
        meets the budget, and α moved so that {α > 0} is that set
        (:func:`~mmdcs.selection.budget_search.project_to_budget`). Returns its report, with
        ratios ``before`` / ``after`` of the baseline and the ``target``."""
        t = self.cost_cfg['target']
        # ranked as the export ranks (a latency budget: by the FLOPs an element does)
        prior = build_prior(None, self, t['input_size'], self._budget)
        rep = project_to_budget(self._budget, self._selectors, t['budget'],
                                self._hidden_selectors,
                                head_selectors=self._head_selectors or None,
                                nested=nested_channels(self.backbone, self._head_selectors),
                                prior=prior)
        base = self._budget.baseline
        return dict(rep, target=t['ratio'], before_ratio=rep['before'] / base,
                    after_ratio=rep['after'] / base)

    def _gate_of(self, alpha: torch.nn.Parameter):
        for m in self.backbone.modules():
            if getattr(m, 'alpha', None) is alpha:
                return m.gate
        raise KeyError('α without a gate')

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample]) -> dict:
        feats = self.extract_feat(inputs)
        losses = self.head.loss(feats, data_samples)
        if self.cost_cfg is not None and self.step_kind == 'arch':
            losses.update(self.search_terms())
        if self.regularizer is not None and self.training:
            losses.update(self._regularizer_terms(inputs, feats, data_samples))
        return losses

    def _regularizer_terms(self, inputs, feats, data_samples) -> Dict[str, torch.Tensor]:
        features = self.head.pre_logits(feats)
        if features.dim() != 2:
            features = features.flatten(1)
        labels = torch.cat([ds.gt_label for ds in data_samples]).to(features.device)
        self.regularizer.update(features.detach(), labels, inputs)
        if not self.reg_active:
            return {}
        terms = self.regularizer.batch_loss(features, labels, inputs)
        weight = self.reg_cfg['eta'] * self.reg_scale
        out = {f'loss_{self.regularizer.name}': weight * terms.pop('loss')}
        out.update(terms)
        return out
