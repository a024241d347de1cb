"""Reading finished runs: ``dba3c plot`` (plots.py) draws runs and sweeps from their files."""
