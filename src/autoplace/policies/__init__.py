"""Neural policies of the learned placers (PyTorch; imported only by the placers that use them)."""

from autoplace.policies.features import GroupFeatures, group_features

__all__ = ["GroupFeatures", "group_features"]
