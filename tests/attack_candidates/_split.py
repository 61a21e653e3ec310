"""The honest GPU kernel the GPU attacks wrap: the split family beside this file."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("attack_split", Path(__file__).resolve().parent / "split.py")
honest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(honest)
