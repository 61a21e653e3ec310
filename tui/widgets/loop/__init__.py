from .log import LoopLog, event_line

__all__ = ["LoopLog", "event_line"]
