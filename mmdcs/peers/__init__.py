"""Peer methods the papers compare against, framework-free (plain PyTorch, no mmengine runner or
registry imports), one subpackage each; the backbones, classifiers and engine pieces that use
them live in :mod:`mmdcs.models` and :mod:`mmdcs.engine`.

* :mod:`.dynamicvit` — DynamicViT (Rao et al., NeurIPS 2021): dynamic token sparsification
* :mod:`.ofb` — Once-for-Both (Ye et al., CVPR 2024): once-for-all search and pruning
"""
