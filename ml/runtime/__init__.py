"""How a stage runs: its command line (``cli.stage_main``) and its worker pools (``compute``: processes or Ray)."""
