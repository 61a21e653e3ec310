from .tree import FrontierTree, member_label

__all__ = ["FrontierTree", "member_label"]
