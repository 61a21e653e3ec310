from .candidate import CandidateScreen
from .dialogs import ConfirmDialog, EngineGoneDialog, GeneralizeDialog, PromptDialog
from .help import HelpScreen
from .main import MainScreen
from .task_picker import TaskPickerApp, TaskPickerScreen, pick_task

__all__ = ["CandidateScreen", "ConfirmDialog", "EngineGoneDialog", "GeneralizeDialog", "HelpScreen", "MainScreen",
           "PromptDialog", "TaskPickerApp", "TaskPickerScreen", "pick_task"]
