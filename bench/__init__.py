"""The benchmark harness: the gateway's own cost, measured against a floor in the
same run. Run ``python -m bench [--quick] [--json PATH]``; see bench/README.md."""
