"""Games the loop can play: the built-in Commander pod (``commander/``), any sequential
OpenSpiel game (``openspiel_env``), and ``registry`` (which one a run plays)."""
