"""`python -m hermes_gateway` is the `hermes` command."""

import sys

from hermes_gateway.guard.early_stop import EARLY

if sys.argv[1:3] == ["gateway", "run"]:
    EARLY.install()  # before the imports below, which take a while: a stop then exits 0

from hermes_gateway.cli.main import main

raise SystemExit(main())
