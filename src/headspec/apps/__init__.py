"""Applications: the command line, the experiments and report, sweeps, figures."""
