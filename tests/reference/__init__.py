"""Reference implementations the tests check the product against (oracles; nothing in ``ml/`` imports them)."""
