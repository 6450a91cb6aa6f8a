"""Playing games with policies: the rollouts every playing stage shares.

- ``runner``: batched play of many games through the ``ml.game.protocol.Game`` protocol (rollout arrays).
- ``seating``: the seatings (the agent rotated through the seats) and simulator seeds of a stage's games.
- ``collect``: PPO self-play collection over worker processes.
- ``teacher``: the teacher's games, written as decision batches.
- ``export``: the PPO agent's decisions from its won games, written in the same format.
"""
