"""A minimal Python agent for engine tests: proposes the plain-torch candidate under a few
names (each a new attempt), so a run's mechanics are exercised fast on the CPU."""

from pathlib import Path

from kdatui.engine.agents.base import Agent, Plan, TurnResult

TORCH = Path(__file__).resolve().parents[2] / "kernels" / "kda" / "torch_chunked.py"


class TorchAgent(Agent):
    name = "torch-test"

    def __init__(self):
        self.n = 0

    def plan(self, ctx):
        self.n += 1
        best = next((m for m in ctx.members if m.best), None)
        return Plan(family="torch", name=f"chunk{16 * self.n}", parent=best.name if best else None,
                    idea=f"torch: plain chunked form, try {self.n}")

    def work(self, ctx, plan, worktree, candidate_dir):
        ctx.log(f"writing {plan.name} (notes: {ctx.notes})")
        src = TORCH.read_text().replace("CHUNK = 32", f"CHUNK = {16 * self.n}")
        (candidate_dir / "kernel.py").write_text(src)
        (candidate_dir / "IDEA.md").write_text(f"family: torch\n\n{plan.idea}\n")
        return TurnResult(True)


SLOW_KERNEL = '''
import time
from pathlib import Path
import importlib.util

_spec = importlib.util.spec_from_file_location("torch_chunked_slow", Path(__file__).resolve().parent / "torch_chunked.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


def kda_forward(*args, **kwargs):
    time.sleep(0.15)  # slow enough that an evaluation is caught in flight
    return _mod.kda_forward(*args, **kwargs)
'''


class SlowAgent(TorchAgent):
    """Like TorchAgent, but its candidates take a few seconds to evaluate."""

    name = "slow-test"

    def work(self, ctx, plan, worktree, candidate_dir):
        (candidate_dir / "torch_chunked.py").write_text(TORCH.read_text())
        (candidate_dir / "kernel.py").write_text(SLOW_KERNEL)
        (candidate_dir / "IDEA.md").write_text(f"family: torch\n\n{plan.idea} (slow)\n")
        return TurnResult(True)


ATTACKS = Path(__file__).resolve().parents[1] / "attack_candidates"


class AttackAgent(TorchAgent):
    """Proposes, in turn, each attack of tests/attack_candidates/ (named by $KDATUI_TEST_ATTACKS,
    comma-separated) as a candidate of the torch family: what a run must keep off the frontier."""

    name = "attack-test"

    def plan(self, ctx):
        import os

        attacks = os.environ.get("KDATUI_TEST_ATTACKS", "stop_the_clock").split(",")
        self.n += 1
        attack = attacks[(self.n - 1) % len(attacks)]
        return Plan(family="torch", name=f"{attack.replace('_', '-')}-{self.n}", parent=None,
                    idea=f"torch: {attack}")

    def work(self, ctx, plan, worktree, candidate_dir):
        attack = plan.idea.split(": ", 1)[1]
        (candidate_dir / f"{attack}.py").write_text((ATTACKS / f"{attack}.py").read_text())
        (candidate_dir / "_honest.py").write_text((ATTACKS / "_honest.py").read_text())
        (candidate_dir / "torch_chunked.py").write_text(TORCH.read_text())
        (candidate_dir / "kernel.py").write_text(f"from {attack} import kda_forward  # noqa: F401\n")
        (candidate_dir / "IDEA.md").write_text(f"family: torch\n\n{plan.idea}\n")
        return TurnResult(True)
