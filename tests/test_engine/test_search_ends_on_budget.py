"""The search loop ends a budget search on its budget (method.md §11): after the last step and
before the epoch-end hooks, so the last checkpoint (what the export reads) and the validation
hold the projected network, and the logs say where it ended."""
import json
import os
import os.path as osp

import pytest
import torch
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _deployed(model):
    lin = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    hidden = {k: int((s.alpha > 0).sum()) for k, s in model._hidden_selectors.items()}
    return lin.ratio(lin.at(kept, hidden))


@pytest.mark.xdist_group('train')
def test_the_last_checkpoint_holds_the_network_on_budget(tiny_digits, tmp_path):
    """The KCR-MobileViT-XS demo search (which ended at 0.945 for 0.92 before), aimed at 0.9 —
    a target the suite uses nowhere else — for one epoch on the tiny digits set."""
    from mmengine.runner import Runner
    cfg = Config.fromfile(osp.join(ROOT, 'configs/demo/kcr-mobilevit-xs_search_digits.py'))
    cls = osp.join(tiny_digits, 'cls')
    cfg.merge_from_dict({
        'work_dir': str(tmp_path), 'train_cfg.max_epochs': 1,
        'train_dataloader.dataset.data_root': cls, 'train_dataloader.num_workers': 0,
        'train_dataloader.persistent_workers': False, 'train_dataloader.batch_size': 16,
        'default_hooks.logger.interval': 1, 'log_level': 'WARNING',
        'default_hooks.checkpoint.save_best': None, 'model.cost.target.flops': 0.9,
    })
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.test_dataloader = cfg.test_cfg = cfg.test_evaluator = None
    runner = Runner.from_cfg(cfg)
    runner.train()
    model = runner.model
    assert _deployed(model) == pytest.approx(0.9, abs=0.02)
    assert _deployed(model) <= 0.9 + 1e-9
    # the checkpoint was saved after the projection: its α are the model's
    state = torch.load(osp.join(str(tmp_path), 'epoch_1.pth'), map_location='cpu',
                       weights_only=False)['state_dict']
    for name, sel in model._selectors.items():
        assert torch.equal(state[f'backbone.{name}.select.alpha'], sel.alpha.detach())
    # the logs: the final deployed ratio is the last arch_cost_ratio_kept of scalars.json
    values = {}
    for root, _, files in os.walk(str(tmp_path)):
        if 'scalars.json' in files:
            with open(osp.join(root, 'scalars.json')) as f:
                for line in f:
                    values.update(json.loads(line))
    assert values['arch_cost_ratio_kept'] == pytest.approx(_deployed(model), abs=1e-6)
    assert 'budget_ratio_before_projection' in values
