"""README.md and docs/ cannot drift from the code.

Every command line in a fenced code block of README.md and docs/**/*.md (continuation lines
joined, variables set earlier in the block substituted) is checked against the repository:

* ``python tools/X.py ...``: the tool exists and every ``--flag`` is an option of its own
  argparse parser (the tool's ``parse_args``, run up to ``parser.parse_args`` and no further:
  nothing of the work runs); a command without placeholders (``CONFIG``, ``[...]``, ``...``,
  ``$VAR``) is parsed in full by the tool's ``parse_args``, which must accept it;
* ``bash tools/X.sh ...``: the script exists; ``dist_train.sh`` / ``dist_test.sh`` options are
  ``train.py`` / ``test.py`` options;
* ``make T``: T is a target of the Makefile, and every target has a ``## what [time]`` line
  that ``make help`` prints;

and in the whole text: every repository path (``configs/...``, ``tools/...``, ``mmdcs/...``,
``tests/...``, ``docs/...``, ``requirements/...``) and every relative link exists, a link's
``#anchor`` names a heading of its file, and every config of the README's model zoo builds
(``mmengine.Config.fromfile`` and the model built by the registry, with its parameters on the
meta device: cheap, no weights allocated).

``doc_problems(name, text)`` returns the problems of one file's text; it runs on any text
(e.g. ``git show REV:README.md``)."""
import argparse
import contextlib
import functools
import glob
import io
import itertools
import os
import os.path as osp
import re
import shlex
from typing import Dict, List, Optional, Tuple
from unittest import mock

import pytest
from _tools import ROOT, load_tool  # noqa: E402 (tests/ is on sys.path)

DOCS = ['README.md'] + sorted(
    osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'docs', '**', '*.md'), recursive=True))

#: a script's options that belong to another tool: torchrun wrappers pass them to train/test
#: (tool, position of GPUS)
FORWARDS = {'tools/dist_train.sh': ('tools/train.py', 2),
            'tools/dist_test.sh': ('tools/test.py', 3)}
INTERPRETERS = re.compile(r'^(\S*/)?(python3?(\.\d+)?|bash|sh|\$\(PY\)|\$PY)$')
TOOL = re.compile(r'^(\./)?(tools/\S+\.(py|sh))$')
#: what makes a command a template rather than one to run as it is
PLACEHOLDER = re.compile(r'[\[\]{}<>|$…]|\.\.\.|(^|[/=.,-])[A-Z][A-Z0-9_]*($|[/=.,-])')
REPO_PATH = re.compile(
    r'(?<![\w./:-])((?:configs|tools|mmdcs|tests|docs|requirements)/[\w./*{},\[\]-]*)')
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')


# ----------------------------------------------------------------------------- reading a doc
def _read(name):
    with open(osp.join(ROOT, name)) as f:
        return f.read()


def fenced_blocks(text: str):
    """(first line number, info string, lines) of every fenced code block (``` or ~~~)."""
    lines, block, start, fence = text.splitlines(), None, 0, None
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if block is None:
            m = re.match(r'^(```+|~~~+)\s*(\S*)', stripped)
            if m:
                block, start, fence, info = [], i + 1, m.group(1), m.group(2)
        elif stripped.startswith(fence):
            yield start, info, block
            block = None
        else:
            block.append(line)


def command_lines(text: str) -> List[Tuple[int, str]]:
    """(line number, command) of every shell line of the fenced blocks: continuation lines
    joined, ``NAME=value`` / ``export NAME=value`` of the block substituted for ``$NAME``."""
    out = []
    for start, info, block in fenced_blocks(text):
        if info.lower() not in ('', 'bash', 'sh', 'shell', 'console', 'text'):
            continue
        env: Dict[str, str] = {}
        i = 0
        while i < len(block):
            first, line = start + i, block[i].rstrip()
            while line.endswith('\\') and i + 1 < len(block):
                i += 1
                line = line[:-1] + ' ' + block[i].strip()
            i += 1
            line = line.strip()
            if line.startswith('$ '):
                line = line[2:]
            words = _tokens(line)
            words = words[1:] if words[:1] == ['export'] else words
            if len(words) == 1 and re.match(r'^[A-Za-z_]\w*=', words[0]):
                key, value = words[0].split('=', 1)
                env[key] = value
                continue
            for name, value in env.items():
                line = re.sub(r'\$\{?%s\}?(?!\w)' % name, lambda _: value, line)
            if line and not line.startswith('#'):
                out.append((first, line))
    return out


def _tokens(line: str) -> List[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in a template: split on spaces
        return line.split('#')[0].split()


def parse_command(line: str):
    """``('tool', path, args)``, ``('make', None, targets)`` or None for another line."""
    tokens = _tokens(line)
    for k, tok in enumerate(tokens):
        if tok in ('|', '||', '&&', ';', '&') or tok.startswith(('>', '2>')):
            tokens = tokens[:k]
            break
    for k, tok in enumerate(tokens):
        m = TOOL.match(tok)
        if m and (k == 0 or INTERPRETERS.match(tokens[k - 1])):
            return 'tool', m.group(2), tokens[k + 1:]
    k = 0
    while k < len(tokens) and (re.match(r'^[A-Za-z_]\w*=', tokens[k]) or
                               tokens[k] in ('time', 'env')):
        k += 1
    if k < len(tokens) and tokens[k] == 'make':
        return 'make', None, [t for t in tokens[k + 1:] if not t.startswith('-') and '=' not in t]
    return None


# ----------------------------------------------------------------------------- the tools
class _Built(Exception):
    """Raised in place of ``parse_args``: the tool's parser is built, nothing else ran."""


@functools.lru_cache(maxsize=None)
def tool_module(path: str):
    return load_tool(path)


@functools.lru_cache(maxsize=None)
def tool_options(path: str) -> frozenset:
    """Every option string of the tool's own parser (built by its ``parse_args``)."""
    module = tool_module(path)
    assert hasattr(module, 'parse_args'), (
        f'{path} has no parse_args(argv): the docs test reads its options from it')
    built = []

    def grab(parser, *args, **kwargs):
        built.append(parser)
        raise _Built

    with mock.patch.object(argparse.ArgumentParser, 'parse_args', grab):
        with contextlib.suppress(_Built):
            module.parse_args([])
    assert built, f'{path}: parse_args built no parser'
    return frozenset(built[0]._option_string_actions)


def full_parse(path: str, args: List[str]) -> Optional[str]:
    """None when the tool's ``parse_args`` accepts ``args``, else its error line."""
    err = io.StringIO()
    saved = dict(os.environ)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            tool_module(path).parse_args(list(args))
    except SystemExit as e:
        if e.code:
            return err.getvalue().strip() or f'exit {e.code}'
    finally:  # train.py / test.py set LOCAL_RANK
        os.environ.clear()
        os.environ.update(saved)
    return None


def flags_of(args: List[str]) -> List[str]:
    flags = []
    for tok in args:
        tok = tok.strip('[]()')
        if re.match(r'^--?[A-Za-z]', tok):
            flags.append(tok.split('=', 1)[0])
    return flags


def tool_problems(path: str, args: List[str]) -> List[str]:
    if not osp.isfile(osp.join(ROOT, path)):
        return [f'{path} does not exist']
    if path in FORWARDS:  # CONFIG [CHECKPOINT] GPUS [options]: all but GPUS are the tool's
        path, gpus = FORWARDS[path]
        args = args[:gpus - 1] + args[gpus:]
    elif path.endswith('.sh'):
        return []
    unknown = [f for f in flags_of(args) if f not in tool_options(path)]
    if unknown:
        return [f'{path} has no option {", ".join(unknown)}']
    if not any(PLACEHOLDER.search(a) for a in args):
        error = full_parse(path, args)
        if error:
            return [f'{path} refuses the arguments: {error}']
    return []


# ----------------------------------------------------------------------------- the Makefile
def makefile_rules() -> Dict[str, str]:
    """target -> the ``## description`` of its rule line ('' without one)."""
    rules = {}
    with open(osp.join(ROOT, 'Makefile')) as f:
        for line in f:
            m = re.match(r'^([A-Za-z0-9_-]+)\s*:(?!=)(.*)$', line)
            if m:
                rules[m.group(1)] = m.group(2).split('## ', 1)[1].strip() if '## ' in line else ''
    return rules


# ----------------------------------------------------------------------------- paths, links
def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading.strip().lower())
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(text: str) -> set:
    seen, out = {}, set()
    in_block = False
    for line in text.splitlines():
        if re.match(r'^\s*(```|~~~)', line):
            in_block = not in_block
        m = None if in_block else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f'{base}-{n}')
    return out


def expand(path: str) -> List[str]:
    """The paths a documented pattern names: ``{a,b}``, an optional ``[part]``, ``*``."""
    m = re.search(r'\{([^{}]*)\}', path)
    if m:
        return [p for alt in m.group(1).split(',')
                for p in expand(path[:m.start()] + alt + path[m.end():])]
    m = re.search(r'\[([^\[\]]*)\]', path)
    if m:
        return expand(path[:m.start()] + path[m.end():]) + expand(
            path[:m.start()] + m.group(1) + path[m.end():])
    return [path]


def path_exists(path: str) -> bool:
    return any(glob.glob(osp.join(ROOT, p)) for p in expand(path))


def path_problems(name: str, text: str) -> List[str]:
    problems = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in REPO_PATH.finditer(re.sub(r'\]\([^)\s]+\)', '] ', line)):  # links: below
            path = m.group(1).split('::')[0].rstrip('.,;:')
            while path.endswith(']') and path.count(']') > path.count('['):
                path = path[:-1]
            if '...' in path or re.search(r'(^|/)[A-Z]{2,}', path) or path.endswith('_'):
                continue
            if not path_exists(path):
                problems.append(f'{name}:{no}: {path} does not exist')
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r'^[a-z]+:', target):
                continue
            file, _, anchor = target.partition('#')
            full = osp.normpath(osp.join(ROOT, osp.dirname(name), file))
            if file and not osp.exists(full):
                problems.append(f'{name}:{no}: link {target}: {file} does not exist')
            elif anchor and (not file or full.endswith('.md')):
                if anchor not in anchors(_read(full) if file else text):
                    problems.append(f'{name}:{no}: link {target}: no heading #{anchor}')
    return problems


# ----------------------------------------------------------------------------- prose, tables
def prose_lines(text: str):
    """(line number, line) of the text outside fenced code blocks."""
    fence = None
    for no, line in enumerate(text.splitlines(), 1):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if m and fence is None:
            fence = m.group(1)
        elif m and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            yield no, line


@functools.lru_cache(maxsize=None)
def tool_names() -> Dict[str, str]:
    """A tool's path by itself and by its file name where that is unique (``latency.py``)."""
    paths = [osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'tools', '**', '*.py'),
                                                    recursive=True)]
    names = {p: p for p in paths}
    for base, group in itertools.groupby(sorted(paths, key=osp.basename), key=osp.basename):
        group = list(group)
        if len(group) == 1:
            names[base] = group[0]
    return names


def inline_problems(name: str, text: str) -> List[str]:
    """Code spans of the prose: ``tools/X.py --flag ...`` must name options of X; a span of
    options alone (``--flag VALUE``) must name options of every tool the sentence names before
    it. A paragraph, a list item and a table row are read apart."""
    problems, para = [], []
    for no, line in itertools.chain(prose_lines(text), [(0, '')]):
        item = re.match(r'^\s*([*-]|\d+\.)\s', line)
        if para and (not line.strip() or item or _table_row(line) or line.lstrip().startswith('#')):
            problems += _paragraph_problems(name, para)
            para = []
        if line.strip() and not line.lstrip().startswith('#'):
            para.append((no, line))
            if _table_row(line):
                problems += _paragraph_problems(name, para)
                para = []
    return problems


def _paragraph_problems(name: str, para: List[Tuple[int, str]]) -> List[str]:
    problems = []
    joined = ' '.join(line for _, line in para)
    for sentence in re.split(r'(?<=[.;:!?])\s+(?=[^a-z0-9])', joined):
        for span, problem in _sentence_problems(sentence):
            no = next((n for n, line in para if span[:30] in line), para[0][0])
            problems.append(f'{name}:{no}: `{span}`: {problem}')
    return problems


def _sentence_problems(sentence: str) -> List[Tuple[str, str]]:
    names = tool_names()
    problems = []
    for m in re.finditer(r'`([^`]+)`', sentence):
        span, tokens = m.group(1), _tokens(m.group(1))
        tools = [k for k, t in enumerate(tokens) if t.lstrip('./') in names]
        if tools:
            path, args = names[tokens[tools[0]].lstrip('./')], tokens[tools[0] + 1:]
            problems += [(span, f'{path} has no option {f}') for f in flags_of(args)
                         if f not in tool_options(path)]
        elif tokens and tokens[0].startswith('--'):
            before = re.findall(r'(?<![\w/.-])((?:tools/[\w/]+|\w+)\.py)\b',
                                sentence[:m.start()])
            for path in dict.fromkeys(names[b] for b in before if b in names):
                problems += [(span, f'{path} (named before it) has no option {f}')
                             for f in flags_of(tokens) if f not in tool_options(path)]
    return problems


def _table_row(line: str) -> bool:
    return len(line.strip()) > 1 and line.strip()[0] == line.strip()[-1] == '|'


def table_problems(name: str, text: str) -> List[str]:
    """Every table has a header and a delimiter row, and as many cells in every row (GFM: an
    unescaped ``|`` splits a cell, inside a code span too)."""
    problems, run = [], []

    def cells(line):
        return len(re.sub(r'\\\|', '', line.strip()).strip('|').split('|'))

    for no, line in itertools.chain(prose_lines(text), [(0, '')]):
        if _table_row(line):
            run.append((no, line))
            continue
        if run:
            if len(run) < 2 or not re.match(r'^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$', run[1][1]):
                problems.append(f'{name}:{run[0][0]}: a table without a delimiter row '
                                f'(its rows render as text)')
            else:
                n = cells(run[0][1])
                problems += [f'{name}:{r}: {cells(line)} cells in a table of {n} columns'
                             for r, line in run if cells(line) != n]
        run = []
    return problems


# ----------------------------------------------------------------------------- one doc
def doc_problems(name: str, text: str) -> List[str]:
    """Everything in one doc that the repository contradicts, as 'file:line: problem'."""
    problems = path_problems(name, text) + inline_problems(name, text) + \
        table_problems(name, text)
    rules = makefile_rules()
    for no, line in command_lines(text):
        found = parse_command(line)
        if found is None:
            continue
        kind, path, args = found
        if kind == 'make':
            problems += [f'{name}:{no}: make {t}: no such Makefile target'
                         for t in args if t not in rules]
        else:
            problems += [f'{name}:{no}: {p}' for p in tool_problems(path, args)]
    return problems


def model_zoo_configs(text: str) -> List[str]:
    """The configs named in the README's '## Model zoo' section."""
    m = re.search(r'^## Model zoo\s*$(.*?)(?=^## |\Z)', text, re.M | re.S)
    assert m, 'README.md has no "## Model zoo" section'
    names = re.findall(r'`(configs/[^`]+\.py)`', m.group(1))
    return sorted({p for name in names for p in expand(name)})


# ----------------------------------------------------------------------------- the tests
@pytest.mark.parametrize('name', DOCS)
def test_commands_paths_and_links_of_the_docs_exist(name):
    problems = doc_problems(name, _read(name))
    assert not problems, '\n'.join(problems)


def test_every_make_target_says_what_it_does_and_how_long():
    rules = makefile_rules()
    assert 'help' in rules and 'demo' in rules and 'test' in rules, rules
    vague = [t for t, d in rules.items() if not re.search(r'\[[^\]]+\]\s*$', d)]
    assert not vague, f'Makefile targets without "## what [time]": {vague}'


def test_model_zoo_configs_build():
    """Every config of the model zoo parses and its model builds through the registries (the
    subnet file a retraining or downstream config names is produced by a search: the
    backbone is built as the supernet it would be pruned from)."""
    import mmengine.config.utils as cfg_utils
    import torch
    from mmdcs.apis.subnet_io import build_model, load_task_config
    configs = model_zoo_configs(_read('README.md'))
    assert len(configs) >= 10, configs
    # an ``mmdet::`` base is found by reading the package's ~80 metafiles, per parse: read each
    # once (they are only read)
    metafile = functools.lru_cache(maxsize=None)(cfg_utils.load)
    with mock.patch.object(cfg_utils, 'load', lambda path: metafile(path)):
        for config in configs:
            cfg, scope = load_task_config(osp.join(ROOT, config))
            cfg.model.get('backbone', {}).pop('subnet', None)
            with torch.device('meta'):
                model = build_model(cfg.model, scope)
            assert any(True for _ in model.parameters()), config


def test_the_checks_catch_what_they_are_for():
    """The checks fail on the kinds of drift they exist for (a snippet with one of each)."""
    text = '\n'.join([
        '# t', '## A heading', 'See [x](docs/none.md), [y](#a-heading), [z](#gone).',
        'Edit `configs/dcs/none_in1k.py` or `configs/det/ssdlite_mobilevit-xs[-dcs]_200e_coco.py`.',
        '```bash',
        'python tools/analysis/complexity.py --config configs/demo/deit-tiny_digits-cls.py',
        'python tools/export_subnet.py CONFIG CKPT --out DIR \\',
        '    --target-flops 0.7 --no-such-flag',
        'python tools/analysis/latency.py --tables work_dirs/t --batch 1',
        'O=work_dirs/x',
        'bash tools/dist_train.sh configs/demo/deit-tiny_digits-cls.py 2 --bogus $O',
        'make demo-nothing',
        'make demo',
        '```',
        'Both `tools/analysis/latency.py` and `complexity.py` take it (`--config CONFIG`).',
        'And `tools/export_subnet.py --refine 2 --no-refine`.',
        '',
        '| a | b |',
        '| 1 | 2 |',
        '',
        '| a | b |', '|---|---|', '| `x|y` | 2 |'])
    problems = doc_problems('README.md', text)
    expected = ['docs/none.md does not exist', 'no heading #gone',
                'configs/dcs/none_in1k.py does not exist',
                'complexity.py has no option --config', 'has no option --no-such-flag',
                'latency.py refuses the arguments', 'train.py has no option --bogus',
                'make demo-nothing: no such Makefile target',
                'complexity.py (named before it) has no option --config',
                'export_subnet.py has no option --no-refine',
                'README.md:18: a table without a delimiter row',
                'README.md:23: 3 cells in a table of 2 columns']
    for what in expected:
        assert any(what in p for p in problems), (what, problems)
    assert len(problems) == len(expected), problems
    assert [no for no, _ in command_lines(text)][:2] == [6, 7]
    assert slug('`make demo` at 0.80 (batch 16, ±0.03)') == 'make-demo-at-080-batch-16-003'
    assert sorted(expand('a[-b]_{c,d}')) == ['a-b_c', 'a-b_d', 'a_c', 'a_d']
