"""The equilibrium options' fast path: teacher games, then generations of train -> PPO -> export,
through the library (no DVC, no gate, no tournament), printing the student's exact NashConv
against the episodes played so far (docs/openspiel.md, "Equilibrium learning").

    python bench/equilibrium_fast.py --game leduc_poker --teacher cfr --explore 0.4 --teacher-games 5000 \
        --generations 2 --magnet 1.0 --tag cfr5k-magnet1

One JSON line per student (``nash_conv``, cumulative ``episodes``: teacher games + PPO episodes
+ exported games, ``wall_s``) and per PPO agent (``ppo_nash_conv``, its episodes, the mean
``magnet_kl`` of its last update). Every figure is a pure function of the arguments (seeded).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

from ml.config.params import Params
from ml.config.sections import ExportParams, RunParams, SelfplayParams
from ml.game.openspiel.spec import openspiel
from ml.judge.nashconv import nash_conv_metrics
from ml.learn.ppo import train_ppo
from ml.learn.settings import RunSettings
from ml.learn.supervised import TrainingData, build_and_train
from ml.play.export import export_batch
from ml.play.runner import StagePlay
from ml.play.teacher import write_teacher_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="leduc_poker")
    ap.add_argument("--teacher", default="cfr", choices=["heuristic", "uniform", "ismcts", "cfr"], help="teacher.policy")
    ap.add_argument("--cfr-iterations", type=int, default=100)
    ap.add_argument("--explore", type=float, default=0.4, help="teacher.explore")
    ap.add_argument("--observation", default="information_state", choices=["observation", "information_state"])
    ap.add_argument("--teacher-games", type=int, default=5000)
    ap.add_argument("--generations", type=int, default=0, help="PPO generations after the first student")
    ap.add_argument("--ppo-steps", type=int, default=20000, help="selfplay.learner_decisions per generation")
    ap.add_argument("--export-games", type=int, default=2000)
    ap.add_argument("--only-wins", action="store_true")
    ap.add_argument("--magnet", type=float, default=0.0, help="selfplay.magnet_kl")
    ap.add_argument("--opponents", default="heuristic:0.5,student:0.5", help="selfplay.opponent_mix as kind:weight,...")
    ap.add_argument("--window", type=int, default=0, help="train.ppo_window (0: every batch)")
    ap.add_argument("--ppo-weight", type=float, default=1.0, help="train.source_weights.ppo (sim: 1)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--samples", type=int, default=20000, help="train.samples_per_epoch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="eqfast-"))
    game = openspiel(a.game, observation=a.observation, teacher_policy=a.teacher, cfr_iterations=a.cfr_iterations)
    mix = {k: float(v) for k, v in (x.split(":") for x in a.opponents.split(","))}
    base = Params()
    tcfg = base.train.model_copy(
        update={"epochs": a.epochs, "samples_per_epoch": a.samples, "hidden_sizes": (128, 128), "lr": a.lr,
                "batch_size": a.batch, "source_weights": {"sim": 1.0, "ppo": a.ppo_weight}, "ppo_window": a.window}
    )  # fmt: skip
    started = time.time()
    teacher_cfg = base.teacher.model_copy(
        update={"games": a.teacher_games, "explore": a.explore}
    )  # the game names the teacher
    teacher = write_teacher_batch(root / "teacher", game, teacher_cfg, "teacher-s1", StagePlay(1 + a.seed))
    episodes = teacher["teacher/games"]
    pool = root / "pool"
    pool.mkdir()
    try:
        for gen in range(a.generations + 1):
            net, tm, _ = build_and_train(tcfg, game, TrainingData(root / "teacher", (pool,)), RunSettings(100 + gen + a.seed))
            tm.update(nash_conv_metrics(net, game, root / "teacher"))
            print(json.dumps({"tag": a.tag, "gen": gen, "nash_conv": round(tm["train/nash_conv"], 4), "episodes": episodes,
                              "wall_s": round(time.time() - started, 1)}), flush=True)  # fmt: skip
            if gen == a.generations:
                break
            cfg = SelfplayParams(**{**base.selfplay.model_dump(), "learner_decisions": a.ppo_steps,
                                    "rollout_steps": 4000, "minibatch_size": 256, "workers": 1, "rollout_chunks": 4,
                                    "opponent_mix": mix, "magnet_kl": a.magnet})  # fmt: skip
            agent, pm = train_ppo(net, {}, cfg, game, RunSettings(200 + gen + a.seed))
            episodes += pm["selfplay/episodes"]
            export_batch(agent, pool, ExportParams(games=a.export_games, only_wins=a.only_wins), RunParams(generation=gen), game,
                         StagePlay(300 + gen), num_envs=16)  # fmt: skip
            episodes += a.export_games
            agent_nc = nash_conv_metrics(agent, game, None, prefix="ppo")["ppo/nash_conv"]
            print(json.dumps({"tag": a.tag, "gen": gen, "ppo_nash_conv": round(agent_nc, 4),
                              "ppo_episodes": pm["selfplay/episodes"], "magnet_kl": pm.get("selfplay/magnet_kl")}), flush=True)  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
