"""The built-in Commander pod simulator: cards and decks (``data/``), the compiled rules engine
(``core/``: rules, scripted players, observation encoder), its PettingZoo AEC environment, the
macro-action space, the observation features and the record models."""
