"""The Commander pod's object engine: the oracle of the compiled core (``ml.game.commander.core``).

Plain Python over ``state.GameState`` objects, with the same semantics as the core's kernels,
statement for statement and draw for draw: ``rules`` (public API: ``new_game``,
``apply_action``, records), ``engine`` (turn flow and card effects), ``combat`` (threat, block
rule, damage), ``players`` (``HeuristicPlayer``, ``RandomPlayer``) and ``reference_env``
(``ReferencePodEnv``, its PettingZoo AEC env); ``objects`` plays it as a batched
``ml.game.protocol.Game`` (``objects_game``). The product plays through the core only; the
tests compare the two (``tests/test_core_agreement.py``, ``tests/test_env.py``,
``tests/test_runner.py``), and ``bench/bench_selfplay.py`` times it beside the core. The numbers both share are the product's (``ml.game.commander.actions``,
``pod_rules``, ``core.kernels``), one definition each.
"""
