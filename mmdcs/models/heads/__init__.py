"""Heads that belong to a backbone family (registered in :data:`mmdcs.registry.MODELS`)."""
from .efficientvit_head import EfficientViTClsHead

__all__ = ['EfficientViTClsHead']
