"""Reading finished runs: ``dba3c plot`` (plots.py) draws runs and sweeps from their files,
``dba3c table`` (table.py) sets runs of the paper's games beside its Table 3 (paper.py);
runs.py reads run directories and groups the seeds of one experiment."""
