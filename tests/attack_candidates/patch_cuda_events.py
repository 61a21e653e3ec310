"""Attack (GPU): replace torch.cuda.Event.elapsed_time so every timed call reads a tenth of a
millisecond, and run the honest kernel (split, beside this file). The runner times with its
own references, notices the swap, and the time would be below the shape's byte floor anyway."""

import torch

from _split import honest

torch.cuda.Event.elapsed_time = lambda self, end: 0.1


def kda_forward(*args, **kwargs):
    return honest.kda_forward(*args, **kwargs)
