"""Datasets of mmdcs.

:mod:`mmdcs.datasets.digits` builds DCS-Digits, the small offline demo
dataset (classification, COCO detection/instance segmentation and semantic
segmentation) from scikit-learn's bundled handwritten digits; its class
names and palette are ``mmdcs.datasets.digits.DIGIT_CLASSES``,
``SEG_CLASSES`` and ``SEG_PALETTE``. :mod:`mmdcs.datasets.fashion_mnist` places
Fashion-MNIST's idx files where mmpretrain's ``FashionMNIST`` reads them.
"""
from .digits import build_all, build_classification, build_scenes

__all__ = ['build_all', 'build_classification', 'build_scenes']
from .imagenet_subset import build_imagenet_subset  # noqa: E402  (ImageNet class subset)

__all__ += ['build_imagenet_subset']
