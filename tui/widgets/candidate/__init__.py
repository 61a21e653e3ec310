from .details import check_rows, summary_lines, trial_rows

__all__ = ["check_rows", "summary_lines", "trial_rows"]
