"""mmdcs: differentiable channel selection for vision transformers (OpenMMLab 2.x plugin).

The environment of this repository is set up by ``make setup`` (tools/setup_env.sh), which
builds mmcv 2.1.0 from source for torch 2.14 and installs this package in editable mode.
"""
import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))


def read_requirements(name):
    """Requirement lines of requirements/<name>.txt (comments and blanks dropped)."""
    lines = []
    with open(osp.join(HERE, 'requirements', name)) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def version():
    scope = {}
    with open(osp.join(HERE, 'mmdcs', 'version.py')) as f:
        exec(f.read(), scope)
    return scope['__version__']


def add_mim_extension():
    """Ship configs/ and tools/ inside the package as mmdcs/.mim/ (what `mim` reads), as mmdet
    and mmpretrain do: copied into wheels and sdists."""
    if not ('sdist' in sys.argv or 'bdist_wheel' in sys.argv):
        return
    mim_path = osp.join(HERE, 'mmdcs', '.mim')
    os.makedirs(mim_path, exist_ok=True)
    for name in ('configs', 'tools'):
        tar = osp.join(mim_path, name)
        if osp.lexists(tar):
            shutil.rmtree(tar) if osp.isdir(tar) and not osp.islink(tar) else os.remove(tar)
        shutil.copytree(osp.join(HERE, name), tar,
                        ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='mmdcs',
        version=version(),
        description='Differentiable channel selection (DCS, KCR) for vision transformers, '
        'an OpenMMLab 2.x plugin',
        long_description=open(osp.join(HERE, 'README.md')).read(),
        long_description_content_type='text/markdown',
        # tools/setup_env.sh builds the environment with Python 3.11 only (torch 2.14.1 and the
        # mmcv 2.1.0 build are tested there); no other version has been run
        python_requires='>=3.11,<3.12',
        classifiers=[
            'Development Status :: 3 - Alpha',
            'Intended Audience :: Science/Research',
            'Operating System :: POSIX :: Linux',
            'Programming Language :: Python :: 3',
            'Programming Language :: Python :: 3.11',
            'Topic :: Scientific/Engineering :: Artificial Intelligence',
        ],
        packages=find_packages(include=['mmdcs', 'mmdcs.*']),
        include_package_data=True,
        package_data={'mmdcs': ['.mim/configs/**/*', '.mim/tools/**/*']},
        install_requires=['torch>=2.0', 'torchvision', 'mmcv>=2.0.0,<2.2.0'] +
        read_requirements('runtime.txt'),
        extras_require={
            'tests': read_requirements('tests.txt'),
            'all': read_requirements('tests.txt'),
            # the peer of tools/analysis/benchmark_peer.py, not a dependency of mmdcs (kept
            # out of requirements/, whose files tools/setup_env.sh hashes). There is no `deploy`
            # extra: onnx, onnxruntime and onnxscript are runtime requirements
            # (requirements/runtime.txt), installed with mmdcs.
            'bench': ['torch-pruning==1.6.1'],
        },
        license='Apache-2.0',
        license_files=['LICENSE'],
        zip_safe=False,
    )
