"""The method, framework-free (plain PyTorch; no mmengine runner or registry imports).

* :mod:`.gates` — binary Gumbel gate with straight-through estimator and a temperature buffer
* :mod:`.selectors` — Q/K channel selection (Linear_θ) and attention-output selection (α)
* :mod:`.attention` — multi-head attention with per-token Q/K channel masks
* :mod:`.mlp` — gated MLP (supernet) and its pruned (deployed) form
* :mod:`.subnet` — subnet description, export, application, state-dict pruning
* :mod:`.cost` — the differentiable cost model of the search
* :mod:`.budget` — budgets: the exact count of the pruned networks, export to a budget by a
  score per unit of cost (α, or the magnitude pruner's weight norms)
* :mod:`.jsonio` — the one reader of the JSON files a user gives (one line for a bad file)
"""
from .attention import DCSAttention
from .cost import COST_MODES, EXPECTATIONS, CostModel, CostTerm
from .budget import (BudgetError, LinearCost, alpha_scores, budget_subnet,
                     magnitude_scores, select_to_budget)
from .gates import BinaryGumbelGate
from .mlp import GatedMLP, PrunedMLP, mlp_residual
from .selectors import DEFAULT_GATE_INIT, ChannelSelector, QKChannelSelector
from .subnet import (SUBNET_FORMAT, SUBNET_FORMATS, BlockSelection, SubnetError, SubnetSpec,
                     apply_subnet_, export_subnet, file_sha256, head_layout,
                     head_prunable_modules, head_selectors, hidden_layout,
                     hidden_prunable_modules, hidden_selectors, prunable_modules,
                     prune_state_dict, selector_layout)
from .utils import (architecture_state_keys, arch_parameters, gates, in_search_state,
                    search_state_keys, set_temperature)

__all__ = [
    'BinaryGumbelGate', 'ChannelSelector', 'QKChannelSelector', 'DEFAULT_GATE_INIT',
    'DCSAttention', 'GatedMLP', 'PrunedMLP', 'mlp_residual', 'CostModel', 'CostTerm',
    'COST_MODES', 'EXPECTATIONS', 'SUBNET_FORMAT', 'SUBNET_FORMATS', 'hidden_layout',
    'hidden_prunable_modules', 'hidden_selectors', 'BlockSelection', 'SubnetSpec', 'SubnetError',
    'export_subnet', 'head_layout', 'head_prunable_modules', 'head_selectors',
    'apply_subnet_', 'prune_state_dict', 'prunable_modules', 'selector_layout', 'file_sha256',
    'arch_parameters', 'architecture_state_keys', 'gates', 'in_search_state',
    'search_state_keys', 'set_temperature', 'BudgetError', 'LinearCost',
    'alpha_scores', 'budget_subnet', 'magnitude_scores', 'select_to_budget'
]
