"""``python -m metasched``: the command line."""
from metasched.cli import main

raise SystemExit(main())
