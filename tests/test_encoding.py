"""The direct state encoder and the record encoder agree on every decision (ml.game.commander.encoding)."""

from __future__ import annotations

import json

import numpy as np

from ml.game.commander.encoding import RecordEncoder
from ml.game.commander.players import HeuristicPlayer, RandomPlayer
from ml.game.commander.records import DecisionRecord
from ml.game.commander.rules import apply_action, decision_record, describe_action, new_game


def _games(n_games: int, pod_size: int):
    """Every decision point of ``n_games`` seeded games, heuristic and random seats mixed."""
    for g in range(n_games):
        state = new_game(1000 + g, pod_size, 30, g)
        players = [(HeuristicPlayer if (g + s) % 3 else RandomPlayer)(g * 7 + s) for s in range(pod_size)]
        while not state.done:
            yield state
            apply_action(state, players[state.current_seat].act(state))


def test_direct_and_record_encoders_agree_on_every_decision_of_200_games():
    encoder = RecordEncoder()
    decisions = 0
    for pod_size in (4, 3):
        for state in _games(100, pod_size):
            direct = encoder.encode_state(state, state.current_seat)
            record = decision_record(state)
            from_dict = encoder(record)
            from_json = encoder(json.loads(json.dumps(record)))
            np.testing.assert_array_equal(direct, from_dict, err_msg=f"{state.game_id} turn {state.turn} {state.phase}")
            np.testing.assert_array_equal(direct, from_json)
            decisions += 1
            if decisions % 10 == 0:  # the validated record model (how files are read) too
                record["action"] = describe_action(state, state.legal[0])
                record["game_outcome"] = "draw"
                np.testing.assert_array_equal(direct, encoder(DecisionRecord.model_validate(record)))
    assert decisions > 10_000


def test_direct_encoder_observes_a_seat_that_is_not_to_act():
    encoder = RecordEncoder()
    state = next(s for s in _games(1, 4) if s.turn == 3)
    for seat in range(4):
        np.testing.assert_array_equal(encoder.encode_state(state, seat), encoder(decision_record(state, seat)))
