"""The overhead benchmark of the search and of the IB/KCR terms runs and prints its ratios."""
import re


def test_benchmark_search_prints_ratios_against_baselines(run_tool):
    proc = run_tool(['tools/analysis/benchmark_search.py', '--arch', 'deit-tiny', '--size', '32',
                     '--batch', '4', '--steps', '1', '--repeats', '1', '--threads', '1',
                     '--target-flops', '0.8'],
                    timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for line in ('plain training step', 'search weight step', 'search arch step',
                 'search epoch average', 'step with the IB  term', 'step with the KCR term',
                 'arch step, FLOPs target', 'epoch average, target'):
        assert re.search(re.escape(line) + r'\s+[\d.]+ ms\s+[\d.]+×', out), (line, out)
    ratios = re.findall(r'ratio ([\d.]+)', out)
    assert ratios == ['1.00', '1.00'], out  # the IB/KCR state does not grow with n
