"""`python -m headspec.apps.cli`: the `headspec` command."""

from headspec.apps.cli import main

main()
