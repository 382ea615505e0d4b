from .selection_classifier import ChannelSelectionClassifier

__all__ = ['ChannelSelectionClassifier']
