"""The honest kernel the attacks wrap: the plain-torch candidate beside this file."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("attack_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
honest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(honest)
