"""The driver of the loop: attempts, git and DVC, the loop's state, curricula, the ledger,
promoted bots and Forge imports. Imported by ``loop.py`` and ``ml.api`` only."""
