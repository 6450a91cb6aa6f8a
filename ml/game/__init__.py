"""The built-in Commander pod simulator (rules, cards, players, PettingZoo AEC environment)."""
