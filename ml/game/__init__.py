"""Games the loop can play, one package per game kind: the built-in Commander pod (``commander/``),
any sequential OpenSpiel game (``openspiel/``) and any PettingZoo AEC env (``pettingzoo/``), each
implementing ``protocol.GameSpec``; ``registry`` (which one a run plays), ``aec`` and ``env_game``
(what the OpenSpiel and PettingZoo adapters share), ``record`` (the record schema every kind shares)."""
