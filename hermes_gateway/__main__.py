"""`python -m hermes_gateway` is the `hermes` command."""

from hermes_gateway.cli.main import main

raise SystemExit(main())
