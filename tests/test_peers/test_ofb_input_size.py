"""OFB's PMIM search at an input size its masking grid does not divide: an ``InputError`` (one
line, exit 2 from the tools), not a plain traceback."""
import types

import pytest
import torch

from mmdcs.utils import InputError


def test_ofb_swin_pmim_grid_refuses_with_an_input_error(capsys):
    from mmdcs.apis.launch import user_errors
    from mmdcs.models.backbones.ofb_swin import OFBSwin
    fake = types.SimpleNamespace(mim_scale=32)
    assert OFBSwin.mim_grid(fake, torch.zeros(1, 3, 64, 96)) == (2, 3)
    with pytest.raises(InputError, match='divisible by 32, got 64x80'):
        OFBSwin.mim_grid(fake, torch.zeros(1, 3, 64, 80))
    with pytest.raises(SystemExit) as e:
        with user_errors():
            OFBSwin.mim_grid(fake, torch.zeros(1, 3, 64, 80))
    assert e.value.code == 2 and capsys.readouterr().err.count('\n') == 1
