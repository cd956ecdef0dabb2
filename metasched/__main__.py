"""``python -m metasched`` and the ``metasched`` command: the command line (``metasched.cli``).

Its modules are loaded here, inside ``main``, so that Ctrl-C while they load (numpy, llvmlite
and scikit-learn take a moment) ends the command as Ctrl-C at any later moment does: one line
and exit code 130, no traceback. That is also why ``import metasched`` loads nothing itself."""
import sys
from typing import Optional, Sequence

EXIT_INTERRUPTED = 130  # as metasched.cli.EXIT_INTERRUPTED, which may not be loaded yet


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    try:
        from metasched.cli import main as run
    except KeyboardInterrupt:
        print("metasched: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)


if __name__ == "__main__":
    raise SystemExit(main())
