"""The built-in Commander pod simulator: rules, cards and decks (``data/``), players, the
PettingZoo AEC environment, the macro-action space and the observation encoder."""
