"""The directory `execute_code` puts on a script's import path: it holds only `hermes_tools`."""
