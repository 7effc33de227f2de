"""`python -m hermes_gateway` is the `hermes` command."""

import gc
import sys

from hermes_gateway.liveness.early_stop import EARLY

if sys.argv[1:3] == ["gateway", "run"]:
    EARLY.install()  # before the imports below, which take a while: a stop then exits 0
    # the start makes ~250,000 objects that live for good: collecting while it imports and
    # starts only scans them again and again (about 8% of the start); `Lifecycle` freezes
    # them and turns collection back on once the gateway is up
    gc.disable()

from hermes_gateway.cli.main import main

raise SystemExit(main())
