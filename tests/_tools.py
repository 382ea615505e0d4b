"""The repository's tools (``tools/*.py``) loaded as modules, so a test can call their
``main(argv)`` or functions in this process (tests/ is on sys.path: the root conftest's dir)."""
import importlib.util
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def load_tool(rel: str):
    """The tool at ``rel`` (e.g. ``'tools/export_subnet.py'``) as a fresh module."""
    name = 'mmdcs_tool_' + rel.replace('/', '_').replace('.py', '')
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, rel))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
