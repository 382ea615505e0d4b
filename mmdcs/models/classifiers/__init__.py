from .dynamicvit_classifier import DynamicViTClassifier
from .ofb_classifier import OFBClassifier
from .selection_classifier import ChannelSelectionClassifier

__all__ = ['ChannelSelectionClassifier', 'DynamicViTClassifier', 'OFBClassifier']
