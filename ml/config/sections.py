"""The sections of ``params.yaml``, one pydantic model each (``ml.config.params`` loads them into ``Params``).

Every field carries a docstring (turned into its description by ``use_attribute_docstrings``)
with its unit; unknown keys are errors and types are strict (see ``ml.config.params``).

Every default is the value the sections of ``params.yaml`` write (its ``profiles`` hold what
differs), so a line deleted there runs the same, and ``params.yaml`` lists every key (``dvc
params diff`` shows every knob) but the three that are unset until a command sets them for a
while (``train.init_checkpoint``: ``--seed-checkpoint``; ``selfplay.frozen_names`` and
``selfplay.abort_if``: a curriculum phase). ``tests/test_defaults.py`` fails on any difference:
change a default here and its line in ``params.yaml`` together.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ml.config.curriculum import AbortIf
from ml.config.yaml_file import At

TEACHER_POLICIES = ("heuristic", "uniform", "ismcts", "cfr", "random")
"""The built-in ``teacher.policy`` values (``TeacherParams.policy``); a PettingZoo game also takes ``<module>:<callable>``."""
DISTRIBUTION_TEACHERS = ("uniform", "ismcts", "cfr")
"""The ``teacher.policy`` values whose teacher keeps the distribution it draws from (``ml.game.openspiel.players``)."""

Source = Literal["forge", "sim", "ppo"]
"""A record's ``source`` (``ml.game.record``): Forge's own files, the simulator's teacher, PPO self-play."""
SOURCES: tuple[str, ...] = get_args(Source)
"""The record ``source`` names, which ``train.source_weights`` may weigh."""


OPPONENT_KINDS = ("frozen", "teacher", "league", "random", "self", "student")
"""The ``selfplay.opponent_mix`` kinds, in the order a seat's draw lays out their weights
(``ml.play.collect``): the order fixes which kind each random number picks, so it is part of a run's bits."""


class _Section(BaseModel):
    """Strict, frozen, documented: the base of every section."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, strict=True, allow_inf_nan=False)


class BaseParams(_Section):
    seed: int = 20261129
    """Project seed; loop.py derives each attempt's ``run.seed`` from it."""
    torch_threads: int = Field(1, ge=1)
    """Threads torch may use in a stage (1 keeps CPU results bit-for-bit reproducible)."""
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    """Device of the supervised and PPO updates: ``auto`` takes the GPU when one is present (rollouts stay on the CPU)."""

    @property
    def torch_device(self) -> str:
        """The concrete device: ``auto`` resolves to ``cuda`` when torch sees a GPU, else ``cpu``."""
        if self.device != "auto":
            return self.device
        import torch  # local: params must load without importing torch

        return "cuda" if torch.cuda.is_available() else "cpu"


class RunParams(_Section):
    generation: int = Field(0, ge=0)
    """Generation of the attempt being run (set by loop.py)."""
    attempt: int = Field(1, ge=1)
    """Attempt number within the generation, 1-based (set by loop.py)."""
    seed: int = 20261129
    """Seed of this attempt (set by loop.py); retries get new seeds so DVC re-runs the stages."""

    @property
    def model_version(self) -> str:
        """Checkpoint name of this attempt, e.g. ``gen-003-a1`` (forge-decision-format.md)."""
        return f"gen-{self.generation:03d}-a{self.attempt}"

    @property
    def batch_id(self) -> str:
        """Batch id of this attempt's PPO export, e.g. ``gen003-a1``."""
        return f"gen{self.generation:03d}-a{self.attempt}"


class GameParams(_Section):
    name: str = "commander"
    """``commander`` (the built-in pod), ``openspiel:<game>``, any sequential OpenSpiel game, or
    ``pettingzoo:<module>:<factory>``, any PettingZoo AEC env with discrete actions and a mask (ml/game/registry.py)."""
    openspiel_params: dict[str, int | float | bool | str] = Field(default_factory=dict)
    """The OpenSpiel game's own parameters, e.g. ``{players: 4}`` for crazy_eights (unused by the commander)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """A PettingZoo game's factory keyword arguments, e.g. ``{render_mode: null}`` (``<factory>(**env_kwargs)``)."""
    observation: Literal["observation", "information_state"] = "observation"
    """OpenSpiel games: what a seat observes, the game's observation tensor (``observation``) or its information-state
    tensor (``information_state``: the seat's whole history, perfect recall; leduc_poker's observation tensor merges
    its 936 information states into 576, so no policy of it reaches an equilibrium). Unused by the commander."""
    pod_size: int = Field(4, ge=2, le=6)
    """Players per pod (commander-pod.md: 2 to 6); for an OpenSpiel game it must equal the game's players, for a PettingZoo env its ``possible_agents``."""
    max_turns: int = Field(30, ge=1, le=32767)
    """Turn cap in rounds, at most 32767 (the core's int16 round counter, ``ml.game.commander.core.MAX_TURNS``); at the cap the game is a draw for the players still in it (commander only)."""


class TeacherParams(_Section):
    games: int = Field(600, ge=1)
    """Heuristic-teacher pods to log (games); every seat's decisions are recorded."""
    mcts_simulations: int = Field(50, ge=1)
    """OpenSpiel games: MCTS simulations per teacher decision (the commander's teacher is the heuristic)."""
    mcts_rollouts: int = Field(1, ge=1)
    """OpenSpiel games: random rollouts per MCTS leaf evaluation."""
    mcts_uct_c: float = Field(2.0, gt=0)
    """OpenSpiel games: the UCT exploration constant of the MCTS teacher."""
    policy: str = "heuristic"
    """Who the teacher (controller kind ``teacher``: teacher games, the gate's and export's opponents,
    the Elo anchor) is. The commander's: ``heuristic``. An OpenSpiel game's: ``heuristic`` MCTS (sees
    hidden cards), ``uniform``, ``ismcts`` (information-set MCTS, ``mcts_*`` knobs), ``cfr`` (CFR+'s
    average policy, games of at most ``ml.game.openspiel.players.CFR_MAX_HISTORIES`` histories); all but MCTS
    write their distribution into the records' ``policy`` (ml/game/openspiel/players.py). A PettingZoo
    game's: ``random`` or ``<module>:<callable>``, ``fn(observation, mask) -> action``
    (ml/game/pettingzoo/players.py)."""

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if ":" not in v and v not in TEACHER_POLICIES:  # a callable's import is checked with the game (ml.game.checks)
            raise ValueError(f"unknown teacher {v!r}: one of {', '.join(TEACHER_POLICIES)}, or <module>:<callable>")
        return v

    explore: float = Field(0.0, ge=0, lt=1)
    """Share of the ``cfr`` and ``ismcts`` teachers' moves drawn uniformly in the teacher games (their records
    keep the teacher's distribution): the games then reach the information states the teacher avoids, where
    a student that never saw them is exploited (leduc_poker: 262 of 936 unseen with 0). Teacher games only."""
    cfr_iterations: int = Field(100, ge=1)
    """CFR+ iterations of the ``cfr`` teacher (leduc_poker: NashConv 0.027 after 100, 0.0046 after 300)."""

    @model_validator(mode="after")
    def _check_explore(self) -> TeacherParams:
        if self.explore and self.policy not in ("cfr", "ismcts"):
            raise At(("explore",), f"teacher.explore needs a teacher with a distribution (cfr, ismcts), not {self.policy}")
        return self


class TrainParams(_Section):
    epochs: int = Field(8, ge=1)
    """Passes of ``samples_per_epoch`` sampled decisions each."""
    batch_size: int = Field(256, ge=1)
    """Decisions per gradient step."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate."""
    hidden_sizes: Annotated[tuple[int, ...], Field(strict=False)] = (256, 256)
    """Widths of the policy/value MLP trunk."""
    samples_per_epoch: int = Field(60_000, ge=1)
    """Decisions drawn (with replacement) from the source mixture per epoch."""
    holdout_fraction: float = Field(0.12, ge=0.10, le=0.15)
    """Share of teacher *games* held out for evaluation (split by game, so no game is in both; 10-15% is usual)."""
    source_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=lambda: {"sim": 1.0, "ppo": 8.0})
    """Mixture ratios of the sampled training set per record ``source`` (``sim``, ``ppo``, ``forge``; another
    name is refused: a misspelt one would silently train without that source); {sim: 1, ppo: 8} makes PPO 8/9
    of it (the newest agent's data decides the student's strength, docs/measurements.md), {sim: 1, ppo: 0.5} a third."""
    min_reward_threshold: float | None = 0.0
    """PPO games whose ``episode_return`` is below this are dropped from training; null: every game
    is kept. At 0.0 the games the agent lost (commander: -1/3, poker: the chips lost) are dropped, so
    the student never sees the agent's moves of a lost game (folding, in poker)."""
    ppo_window: int = Field(1, ge=0)
    """Newest accepted PPO batches the student learns from (by generation); 0: all of them.
    Older batches come from weaker agents and dilute the newest (docs/measurements.md)."""
    ppo_recency: float = Field(1.0, gt=0, le=1)
    """Recency weighting of the window's batches: each older batch's decisions weigh this times
    the next newer one's (1: every PPO decision alike; docs/measurements.md, "Data window")."""
    init_checkpoint: str | None = None
    """Warm start: a checkpoint (repo-relative path) the student starts from instead of random weights (``--seed-checkpoint``)."""
    warm_start: bool = False
    """Students after the first continue the last accepted one (``warm_epochs`` at ``warm_lr``; docs/openspiel.md), kept
    as it is while the data is the same, so a retry's nudge changes only its candidate (``ml.learn.reuse``)."""
    warm_epochs: int | None = Field(None, ge=1)
    """Epochs of a warm-started training; null: ``epochs``."""
    warm_lr: float | None = Field(None, gt=0)
    """Adam learning rate of a warm-started training (Adam starts anew: a from-scratch rate throws it far); null: ``lr``."""
    value_coef: float = Field(0.5, ge=0)
    """Weight of the value (game outcome) loss next to the imitation cross-entropy."""
    distill: Literal["kl", "hard"] = "kl"
    """PPO records with the agent's ``policy``: fit it by KL divergence (``kl``, Rusu et al. 2016) or the chosen action only (``hard``)."""
    average: Literal["mixture", "fictitious"] = "mixture"
    """How the PPO batches of the window weigh: ``mixture``, ``source_weights`` as written (a batch weighs by its
    decisions); ``fictitious``, each batch counts as one policy whatever its size and the ``ppo`` weight is multiplied
    by the number of batches (``ppo_recency`` discounts included), so with ``{sim: 1, ppo: 1}`` the teacher data and
    every accepted batch each hold 1/(n+1) of the training set: fictitious play's running average of the
    generations' policies (Heinrich et al. 2015; the student is the average, the agents the best responses)."""

    @field_validator("source_weights")
    @classmethod
    def _known_sources(cls, weights: dict[str, float]) -> dict[str, float]:
        if unknown := sorted(set(weights) - set(SOURCES)):
            raise At((unknown[0],), f"unknown source {', '.join(map(repr, unknown))} (records name {', '.join(SOURCES)})")
        return weights

    @model_validator(mode="after")
    def _check_weights(self) -> TrainParams:
        if not any(w > 0 for w in self.source_weights.values()):
            raise At(("source_weights",), f"source_weights needs at least one weight > 0, got {self.source_weights}")
        return self


class SelfplayParams(_Section):
    renamed: ClassVar[dict[str, str]] = {"total_steps": "learner_decisions"}
    """Former key -> its name now (an error that names the new key, ``ml.config.yaml_file.message``)."""

    learner_decisions: int = Field(300_000, ge=1)
    """PPO agent (learner) decisions collected in total, across all concurrent games: a floor, as each
    round's games in flight finish past it."""
    num_envs: int = Field(16, ge=1)
    """Concurrent games whose policy queries are batched into one forward pass."""
    rollout_steps: int = Field(4096, ge=1)
    """Agent decisions per PPO update."""
    lr: float = Field(3e-4, gt=0)
    """Adam learning rate of the PPO update."""
    gamma: float = Field(0.995, gt=0, le=1)
    """Discount per agent decision."""
    gae_lambda: float = Field(0.95, ge=0, le=1)
    """GAE lambda (Schulman et al. 2016)."""
    clip_coef: float = Field(0.2, gt=0)
    """PPO ratio clipping epsilon (Schulman et al. 2017)."""
    ent_coef: float = Field(0.01, ge=0)
    """Entropy bonus coefficient of generation 0 (see ``ent_decay``)."""
    ent_decay: float = Field(1.0, gt=0, le=1)
    """Per-generation factor of the entropy bonus: generation G's PPO uses ``ent_coef * ent_decay**G``
    (``entropy_coefficient``); 1: the same bonus in every generation. Below 1 the entropy-regularised
    fixed point that PPO self-play approaches moves toward a Nash equilibrium (Sokota et al. 2023)."""
    vf_coef: float = Field(0.5, ge=0)
    """Value loss coefficient."""
    max_grad_norm: float = Field(0.5, gt=0)
    """Global gradient-norm clip."""
    update_epochs: int = Field(4, ge=1)
    """Passes over each rollout per update."""
    minibatch_size: int = Field(512, ge=1)
    """Decisions per PPO minibatch."""
    workers: int = Field(0, ge=0)
    """Rollout worker processes; 0 = one per core. The result does not depend on it (see rollout_chunks)."""
    rollout_chunks: int = Field(8, ge=1)
    """Fixed pieces of each round, each with its own seed, shared out among the workers (ml/play/collect.py)."""
    opponent_mix: dict[str, float] = Field(default_factory=lambda: {"teacher": 0.6, "frozen": 0.2, "self": 0.2})
    """Probability of each opponent kind per opponent seat: the game's teacher (``teacher``), frozen earlier generation's agent
    (uniformly), current policy (``self``), the generation's starting student (``student``, frozen), uniform
    (``random``), a member of the league (``league``: every accepted generation's agent and student, drawn by
    PFSP weights, ``pfsp_k`` and ``league_floor``; ml/play/league.py)."""
    pfsp_k: float = Field(2.0, ge=0)
    """Exponent k of the league's PFSP weight (1 - p_win)^k (Vinyals et al. 2019; 0: every member alike)."""
    league_floor: float = Field(0.02, ge=0, le=1)
    """Each league member's least share of the ``league`` draws (old members stay in play)."""
    start: Literal["student", "agent"] = "student"
    """What PPO starts from: the generation's student, or the newest accepted agent in data/frozen with its
    optimizer state (the student when there is none yet)."""
    magnet_kl: float = Field(0.0, ge=0)
    """Weight of KL(agent || starting student) on each PPO batch's decisions, the magnet of magnetic mirror
    descent (Sokota et al. 2023; ml/learn/ppo.py); 0: none. A larger weight keeps the agent nearer the student."""
    frozen_names: list[str] | None = None
    """Only these frozen opponents (file stems in data/frozen, e.g. ``gen002``); None: all. Set by a curriculum phase."""
    abort_if: AbortIf | None = None
    """Stop the attempt early when a training metric is below a bar after some PPO steps (set by a curriculum phase)."""

    def entropy_coefficient(self, generation: int) -> float:
        """The entropy bonus of ``generation`` (>= 0): ``ent_coef * ent_decay**generation``."""
        return self.ent_coef * self.ent_decay**generation

    @model_validator(mode="after")
    def _check_mix(self) -> SelfplayParams:
        unknown = set(self.opponent_mix) - set(OPPONENT_KINDS)
        if "heuristic" in unknown:
            raise At(("opponent_mix",), "opponent kind 'heuristic' is now called 'teacher'; rename the key")
        if unknown:
            raise ValueError(f"unknown opponent kinds {sorted(unknown)}; use {', '.join(OPPONENT_KINDS)}")
        if not any(w > 0 for w in self.opponent_mix.values()):
            raise ValueError("opponent_mix needs at least one weight > 0")
        return self


class ExportParams(_Section):
    games: int = Field(600, ge=1)
    """Games the PPO agent plays (one seat, rotated) against the teacher for export."""
    only_wins: bool = True
    """Export only the agent's decisions from games it won."""
    explore: float = Field(0.0, ge=0, lt=1)
    """Share of the agent's export moves drawn uniformly from the legal ones; its records keep the agent's
    distribution as the target (``policy``), so the student also sees the information states the agent avoids
    (as ``teacher.explore`` for the teacher games). 0: every move from the agent."""
    targets: Literal["agent", "teacher"] = "agent"
    """The records' ``policy`` (the student's KL target): the agent's distribution (``agent``), or the teacher's
    at the same decisions (``teacher``: the agent chooses the states, the teacher labels them, as DAgger does;
    needs a teacher that keeps a distribution, ``DISTRIBUTION_TEACHERS``)."""


class GateParams(_Section):
    gated: bool = True
    """Whether the verdict decides; an ungated attempt still measures and logs every figure but always advances."""
    opponent: Literal["teacher", "random"] = "teacher"
    """Reference players of the strength check: the game's teacher (default) or the uniform-random player."""

    @field_validator("opponent", mode="before")
    @classmethod
    def _former_name(cls, v: object) -> object:
        if v == "heuristic":
            raise ValueError("'heuristic' is now called 'teacher'")
        return v

    target_win_rate: float = Field(0.35, gt=0, lt=1)
    """SPRT alternative H1: the PPO agent's first-place rate against teachers (H0 is parity, 1/pod size)."""
    alpha: float = Field(0.05, gt=0, lt=0.5)
    """False-accept rate of both SPRTs: an agent at parity (strength), a student worse by ``student_margin`` (student); McNemar's level."""
    beta: float = Field(0.05, gt=0, lt=0.5)
    """False-reject rate of both SPRTs: an agent at the target rate (strength), a student equal to the current one (student)."""
    min_games: int = Field(40, ge=1)
    """Fewest evaluation games before the SPRT may stop (games)."""
    max_games: int = Field(1000, ge=1)
    """Most evaluation games; undecided at this point counts as H0 (games)."""
    confidence: float = Field(0.95, gt=0, lt=1)
    """Two-sided confidence level of the reported intervals."""
    max_accuracy_drop: float = Field(0.15, ge=0, le=1)
    """Accuracy drop on the teacher holdout that counts as a collapse of basic play when McNemar's test confirms it.

    Students that beat the teacher agree less with it (3-7 points a generation), and a useless
    batch barely moves agreement (docs/design-notes.md), so the check only guards a collapse."""
    student_games: int = Field(2000, ge=1)
    """Most pods of the student check's sequential test (games, seat-rotated duplicate deals; it stops earlier when decided)."""
    student_min_games: int = Field(200, ge=1)
    """Fewest decisive pods before the student check may decide (games)."""
    student_margin: float = Field(0.05, gt=0, lt=0.5)
    """Fall back rejected: the candidate student's first-place share among decisive pods at parity minus this (SPRT H0)."""
    strength_test: Literal["auto", "first_place", "mean_return"] = "auto"
    """What the strength and student checks test: ``first_place`` (the SPRTs on first places), ``mean_return``
    (the SPRTs on the mean return by deal, ``ml.judge.mean_return.ReturnSPRT``; two-player zero-sum games only) or ``auto``
    (``mean_return`` for a zero-sum game, ``GameSpec.zero_sum``, ``first_place`` otherwise)."""
    target_return: float = Field(0.5, gt=0)
    """Return SPRT alternative H1: the PPO agent's mean return per game against the opponents above par (chips; H0 is par)."""
    student_margin_return: float = Field(0.25, gt=0)
    """Fall back rejected by return: the candidate student's mean return against the current one at par minus this (chips)."""
    decide_by: Literal["tests", "nash_conv"] = "tests"
    """``tests``: the strength, holdout and student checks decide; ``nash_conv``: the candidate student's exact NashConv
    decides (the tests are measured and reported): it must not exceed the current student's by more than
    ``nash_conv_tolerance`` (games whose tree ``ml.game.checks.nash_conv_refusal`` accepts)."""
    nash_conv_tolerance: float = Field(0.0, ge=0)
    """NashConv rise tolerated with ``decide_by: nash_conv`` (the game's utility units, chips in poker)."""

    @model_validator(mode="after")
    def _check_games(self) -> GateParams:
        for lo, hi in (("min_games", "max_games"), ("student_min_games", "student_games")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo} ({getattr(self, lo)}) must not exceed {hi} ({getattr(self, hi)})")
        return self


class RatingParams(_Section):
    games: int = Field(200, ge=0)
    """Tournament pods played after each accepted generation (games); the newest student sits in each."""
    prior_sigma_elo: float = Field(400.0, gt=0)
    """Standard deviation of the weak prior linking consecutive generations' ratings (Elo)."""
    report_games: int = Field(100, ge=0)
    """Pods per promoted bot in the final report (games)."""


class LoopParams(_Section):
    max_generations: int = Field(2, ge=1)
    """Generations to run before the loop stops."""
    max_retries: int = Field(2, ge=0)
    """Retries of a generation after a rejected attempt before the loop blocks for a human."""
    convergence_elo: float = Field(10.0, gt=0)
    """Converged when the newest generation's Elo gain is known to lie within +-this (Elo) ..."""
    convergence_window: int = Field(2, ge=1)
    """... for this many accepted generations in a row."""
    suggest_on_retry: bool = True
    """After a rejection, nudge the retry's params by the bounded rules of ml/driver/feedback.py."""
    result: Literal["student", "agent"] = "student"
    """Which policy of an accepted generation is the run's result, the one ``loop.py compare`` plays: the student
    (data/students), or the PPO agent (data/frozen; the ``ppo_only`` profile)."""


class ComputeParams(_Section):
    """Where the games of every playing stage run (``ml/runtime/compute.py`` is the executor these settings configure).

    Only ``chunk_games`` can change a result; the backend, the workers, the address and the resources never do
    (``tests/test_ray.py``, ``tests/test_compute.py``), so ``dvc.yaml`` lists ``compute.chunk_games`` only.
    """

    backend: Literal["local", "ray"] = "local"
    """``local``: this machine (``workers`` processes; self-play: ``selfplay.workers``); ``ray``: every chunk a Ray task at ``address``."""
    workers: int = Field(1, ge=0)
    """``local``: processes for the playing stages' chunks and large files' parse (1: in process; 0: one per core; ~4 s to start)."""
    address: str = Field("local", pattern=r"^(local|auto|ray://[^\s:/]+:\d+|[^\s:/]+:\d+)$")
    """Ray cluster: ``local`` (a Ray started on this machine for the stage, stopped after it), ``auto`` (the
    cluster ``ray start`` runs on this machine), ``host:port`` (a head node's GCS) or ``ray://host:port`` (Ray Client)."""
    cpus_per_chunk: float = Field(1.0, gt=0)
    """CPUs Ray reserves for each chunk (a chunk plays its games on one core)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each chunk needs, e.g. ``{rollout: 1}`` to keep chunks on nodes started with that resource."""
    max_retries: int = Field(3, ge=0)
    """Times Ray re-runs a chunk whose worker or node died (the result is the same: a chunk is a pure function of its seed)."""
    max_in_flight: int = Field(0, ge=0)
    """Chunks submitted ahead of the one being read by a stage that stops early (the gate's SPRT); 0: the cluster's CPUs."""
    connect_timeout_s: float = Field(15.0, gt=0)
    """Seconds the start-up check of a ``host:port`` or ``ray://`` address may take (connect, then a gRPC call
    only a Ray GCS answers, ``ml.runtime.ray_cluster.grpc_check``, grpcio) before the stage fails naming the address and what is there."""
    chunk_games: int = Field(0, ge=0)
    """Games per chunk of the teacher, export and the rating tournaments (by game index); 0: one chunk per stage.
    Changes export's and the tournament's games (each chunk samples with its own seed); self-play uses
    ``selfplay.rollout_chunks``, the gate's pods fixed chunks of 16 deals."""
