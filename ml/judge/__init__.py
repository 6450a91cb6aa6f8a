"""Judging policies with honest statistics.

- ``stats``: Wilson intervals, SPRTs on win rates and on returns, McNemar's test.
- ``deals``: paired deals, seat rotation and by-deal win rates.
- ``ratings``: tournaments and Elo / Plackett-Luce ratings with confidence intervals.
- ``nashconv``: exact NashConv of small two-player zero-sum games.
- ``gate``: the quality gate of a PPO batch (strength, holdout, student checks).
"""
