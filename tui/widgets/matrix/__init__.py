from .rows import MatrixRow, cell_text, matrix_rows
from .table import TimingMatrix

__all__ = ["MatrixRow", "TimingMatrix", "cell_text", "matrix_rows"]
