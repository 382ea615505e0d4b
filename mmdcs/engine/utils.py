"""Small helpers of the runner-side code."""
import torch.nn as nn
from mmengine.model import is_model_wrapper


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside an mmengine / torch model wrapper (DDP, FSDP...), or the model itself."""
    return model.module if is_model_wrapper(model) else model
