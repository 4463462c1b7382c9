"""`python -m shou` is the `shou` command."""

from .cli.app import main

main()
