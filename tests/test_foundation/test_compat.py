"""The compatibility patches (mmdcs/utils/compat.py), applied once by mmdcs.registry whatever the
order in which mmdcs and mmdet are imported."""
import subprocess
import sys
import textwrap
import types

import pytest

from mmdcs.utils.compat import patch_mmdet_ssd_head, patch_on_import


def _fresh(code):
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize('first, then', [
    ('import mmdcs.registry', 'import mmdet.models.dense_heads.ssd_head as m'),
    ('import mmdet.models.dense_heads.ssd_head as m', 'import mmdcs.registry'),
])
def test_ssd_head_is_patched_in_either_import_order(first, then):
    proc = _fresh(f"""
        import sys
        assert 'mmdet.models.dense_heads.ssd_head' not in sys.modules
        {first}
        {then}
        m = sys.modules['mmdet.models.dense_heads.ssd_head']
        print('patched', m.SSDHead.loss_cls is None)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'patched True' in proc.stdout


def test_ssd_patch_keeps_an_existing_loss_cls():
    class SSDHead:
        loss_cls = 'own'

    patch_mmdet_ssd_head(types.SimpleNamespace(SSDHead=SSDHead))
    assert SSDHead.loss_cls == 'own'


def test_patch_on_import_runs_after_the_first_import(tmp_path, monkeypatch):
    (tmp_path / 'mmdcs_probe_module.py').write_text('VALUE = 1\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, 'meta_path', list(sys.meta_path))  # the hook goes with the test
    seen = []
    patch_on_import('mmdcs_probe_module', lambda m: seen.append(m.VALUE))
    assert seen == []
    import mmdcs_probe_module  # noqa: F401
    assert seen == [1]
    patch_on_import('mmdcs_probe_module', lambda m: seen.append(m.VALUE + 1))  # already there
    assert seen == [1, 2]
    monkeypatch.delitem(sys.modules, 'mmdcs_probe_module')
