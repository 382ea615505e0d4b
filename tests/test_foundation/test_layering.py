"""The import layers of mmdcs (docs/architecture.md): no package imports one above it, the
method core imports no OpenMMLab framework, and internal imports are at the top of a module
(visible), except a function-local one an optional dependency needs, marked ``# lazy import:``
with the reason on its line."""
import ast
import os
import os.path as osp

import pytest

ROOT = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'mmdcs')

#: bottom to top; a package may import its own layer and those below it
LAYERS = (
    ('checks', 'selection', 'regularizers', 'peers'),
    ('registry', 'utils', 'version'),
    ('models', 'datasets'),
    ('engine', ),
    ('analysis', ),
    ('apis', ),
)
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
#: the method core is plain PyTorch
FRAMEWORK_FREE = LAYERS[0]
FRAMEWORKS = ('mmengine', 'mmcv', 'mmpretrain', 'mmdet', 'mmseg')
ALLOW = '# lazy import:'


def _modules():
    for d, _, files in os.walk(ROOT):
        for f in sorted(files):
            if f.endswith('.py'):
                path = osp.join(d, f)
                rel = osp.relpath(path, osp.dirname(ROOT))[:-3].split(os.sep)
                if rel[-1] == '__init__':
                    rel = rel[:-1]
                yield path, rel


def _target(node, module, is_package):
    """The absolute dotted names an import statement reads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module if is_package else module[:-1]
    if node.level:
        base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
        prefix = '.'.join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module
    if prefix == 'mmdcs':  # from mmdcs import registry
        return [f'mmdcs.{a.name}' for a in node.names]
    return [prefix]


def _imports(path, module):
    """(line, target, inside a function, source line) of every import of the module."""
    src = open(path, encoding='utf-8').read()
    lines = src.splitlines()
    tree = ast.parse(src)
    is_package = path.endswith('__init__.py')
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for t in _target(child, module, is_package):
                    out.append((child.lineno, t, in_function, lines[child.lineno - 1]))
            visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def _package(module):
    return module[1] if len(module) > 1 else None


def _violations():
    upward, local, framework = [], [], []
    for path, module in _modules():
        pkg = _package(module)
        for line, target, in_function, text in _imports(path, module):
            where = f'{osp.relpath(path, osp.dirname(ROOT))}:{line}'
            parts = target.split('.')
            if parts[0] in FRAMEWORKS and pkg in FRAMEWORK_FREE:
                framework.append(f'{where} imports {target}')
            if parts[0] != 'mmdcs':
                continue
            if in_function and ALLOW not in text:
                local.append(f'{where}: {text.strip()}')
            dep = parts[1] if len(parts) > 1 else None
            if pkg in RANK and dep in RANK and RANK[dep] > RANK[pkg]:
                upward.append(f'{where}: mmdcs.{pkg} imports {target} (a layer above it)')
    return upward, local, framework


def test_every_package_has_a_layer():
    pkgs = {_package(m) for _, m in _modules()} - {None}
    assert pkgs <= set(RANK), f'give these packages a layer: {sorted(pkgs - set(RANK))}'


def test_no_package_imports_a_layer_above_it():
    upward, _, _ = _violations()
    assert not upward, '\n'.join(upward)


def test_internal_imports_are_at_module_level():
    _, local, _ = _violations()
    assert not local, ('function-local mmdcs imports (move them to the top, or mark an '
                       f'optional dependency with "{ALLOW} <reason>"):\n' + '\n'.join(local))


def test_method_core_imports_no_framework():
    _, _, framework = _violations()
    assert not framework, '\n'.join(framework)


@pytest.mark.parametrize('code, expect', [
    ('from mmdcs.apis.launch import UserError\n', 'upward'),
    ('def f():\n    from mmdcs.selection import gates\n', 'local'),
    ('def f():\n    from mmdcs.selection import gates  # lazy import: optional x\n', None),
    ('def f():\n    from . import kmeans\n', 'local'),
])
def test_the_checks_catch_what_they_should(tmp_path, monkeypatch, code, expect):
    """The checks themselves, on a throw-away module placed in mmdcs/regularizers."""
    import sys
    mod = sys.modules[__name__]
    fake_root = tmp_path / 'mmdcs'
    (fake_root / 'regularizers').mkdir(parents=True)
    (fake_root / 'regularizers' / '__init__.py').write_text('')
    (fake_root / 'regularizers' / 'probe.py').write_text(code)
    monkeypatch.setattr(mod, 'ROOT', str(fake_root))
    upward, local, _ = _violations()
    assert bool(upward) == (expect == 'upward')
    assert bool(local) == (expect == 'local')
