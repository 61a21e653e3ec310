"""`kdatui` command line. Each verb lives in a `verbs_*.py` module with a `register(sub)`
function; errors a user can meet (a bad task file, a missing candidate, no git repo)
print one line and exit 2, never a traceback. The exit statuses are listed in `--help`."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .common import EXIT_OK, EXIT_USAGE, UserError

# The modules that add verbs, in the order `kdatui --help` lists them.
VERB_MODULES = ["verbs_check", "verbs_bench", "verbs_run", "verbs_frontier", "verbs_info", "verbs_doctor"]
EXIT_INTERRUPTED = 130
EPILOG = """exit status:
  0    done (a check or bench whose candidate passed every shape)
  1    a candidate failed: check, bench or recheck found a verdict other than PASS
  2    usage or a problem to fix first: bad arguments or task file, no git repo, no engine
       running (for the verbs that talk to one), a refused command
  130  interrupted (Ctrl-C)

`kdatui` alone attaches to the live run, or offers the tasks to start one.
Shell completion: kdatui completion bash|zsh|fish."""


def build_parser() -> argparse.ArgumentParser:
    from .verbs_info import VersionAction

    p = argparse.ArgumentParser(
        prog="kdatui", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Supervise an agent-driven search for fast Kimi Delta Attention kernels.")
    p.add_argument("--version", action=VersionAction, version=__version__)
    sub = p.add_subparsers(dest="verb", metavar="COMMAND")
    for name in VERB_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from kdatui.engine.candidate import CandidateError
    from kdatui.engine.store import FrontierError
    from kdatui.engine.task import TaskError

    try:
        if not getattr(args, "func", None):  # `kdatui` alone: the live run, or the tasks
            from .verbs_run import start_or_attach

            try:
                return start_or_attach()
            except (UserError, FrontierError):
                parser.print_help()
                return EXIT_OK
        return args.func(args)
    except (UserError, TaskError, CandidateError, FrontierError) as e:
        print(f"kdatui: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kdatui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kdatui status | head`: the reader left; nothing to say
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
