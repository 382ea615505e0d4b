"""Shared fixtures: a tiny digits dataset built once per test session (per xdist worker)."""
import os
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: mmdcs.utils.checkpoint.KEY_DIR_ENV: where the user's manifest key is kept
KEY_DIR_ENV = 'MMDCS_CONFIG_DIR'

# tests run two at a time on two cores: one thread each
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('MKL_NUM_THREADS', '1')


@pytest.fixture(scope='session', autouse=True)
def _private_checkpoint_key(tmp_path_factory):
    """The key of the checkpoint manifests (mmdcs.utils.checkpoint.key_path) in a directory of
    the test session, never the user's own (tools the tests start inherit it)."""
    saved = os.environ.get(KEY_DIR_ENV)
    os.environ[KEY_DIR_ENV] = str(tmp_path_factory.mktemp('mmdcs-config'))
    yield
    if saved is None:
        os.environ.pop(KEY_DIR_ENV, None)
    else:
        os.environ[KEY_DIR_ENV] = saved


@pytest.fixture(scope='session')
def tiny_digits(tmp_path_factory):
    """A small real digits dataset (20 images per class, 12 + 6 scenes) in a temp dir."""
    from mmdcs.datasets.digits import build_classification, build_scenes
    out = tmp_path_factory.mktemp('digits')
    build_classification(str(out), size=64, seed=0, max_per_class=20)
    build_scenes(str(out), canvas=128, scenes_train=12, scenes_val=6, seed=0)
    return str(out)


def _run_tool(args, timeout=600, env=None, cwd=ROOT):
    """Run a repository tool with this interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable] + list(args), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=full_env)


@pytest.fixture
def run_tool():
    """``run_tool(['tools/train.py', ...])``: a tool of the repository in a subprocess."""
    return _run_tool


@pytest.fixture
def repo_root():
    return ROOT


@pytest.fixture(autouse=True)
def _forget_mmengine_loggers():
    """Tests that run a tool in this process create mmengine loggers named after the config and
    the second they start; a later run of the same config within that second would get the
    earlier logger back, still writing to an earlier test's (closed) captured stream ("---
    Logging error ---"). Drop the loggers a test created, so each run starts with its own."""
    mmengine_logging = sys.modules.get('mmengine.logging')
    before = set(mmengine_logging.MMLogger._instance_dict) if mmengine_logging else set()
    yield
    mmengine_logging = sys.modules.get('mmengine.logging')
    if mmengine_logging is None:
        return
    instances = mmengine_logging.MMLogger._instance_dict
    for name in set(instances) - before:
        logger = instances.pop(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()


@pytest.fixture(autouse=True)
def _restore_checkpoint_trust():
    """A test that calls a tool's function in this process without its ``main`` (e.g.
    ``tool.export(tool.parse_args(...))``) leaves the checkpoint trust that function set
    (``set_checkpoint_trust``: the trusted files and the tool's flag named in a refusal); a
    later test in the same xdist worker would then see a refusal naming ``--trust-checkpoint``
    instead of the config key. Put the trust state back as it was before each test."""
    from mmdcs.utils.checkpoint import trust_scope
    with trust_scope():
        yield


@pytest.fixture(autouse=True)
def _restore_default_scope():
    """A test that builds a runner (or calls register_all_modules) leaves an mmengine
    DefaultScope current, which sends a later test's unprefixed builds to that scope's registry:
    whether such a test passes would depend on which tests ran before it in its xdist worker.
    Put the scopes back as they were before each test."""
    registry = sys.modules.get('mmengine.registry')
    saved = dict(registry.DefaultScope._instance_dict) if registry else {}
    yield
    registry = sys.modules.get('mmengine.registry')
    if registry is not None:
        instances = registry.DefaultScope._instance_dict
        instances.clear()
        instances.update(saved)
