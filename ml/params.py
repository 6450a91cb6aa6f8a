"""The only reader of ``params.yaml``: one pydantic model per section.

Every field carries a docstring (turned into its description by
``use_attribute_docstrings``) with its unit. Unknown keys are errors
(``extra="forbid"``), types are strict (pydantic strict mode: ``epochs: true``,
``epochs: "6"`` or ``epochs: 6.0`` is no integer, ``gated: 1`` no boolean; an integer is a
valid float; ``.inf`` and ``.nan`` are refused), and every error names the file, the line
where known, the section and the key. Profiles and curriculum phases are checked when the
file loads: each one's overrides on top of the params must validate, an error names the
profile or phase, and phase names must differ. The YAML is read as YAML 1.2 reads floats
(``1e-3`` is a number) and a key written twice is an error.

Seeds: every random source of a stage derives from ``run.seed`` (set by ``loop.py`` per
attempt from ``base.seed``, generation and attempt) plus a fixed per-stage offset from
``STAGE_SEED_OFFSETS``, so the same params give the same result.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ml.curriculum import AbortIf, Phase, phase_overrides
from ml.params_compute import ComputeParams
from ml.params_yaml import At, KeyPath, ParamsError, error_lines, message, read_yaml

DEFAULT_PARAMS_PATH = Path("params.yaml")

STAGE_SEED_OFFSETS = {
    "teacher": 0,
    "train": 1_000,
    "selfplay": 2_000,
    "export": 3_000,
    "gate": 4_000,
    "rating": 6_000,
    "report": 7_000,
    "eval": 8_000,
}
"""Fixed per-stage offsets added to the stage's root seed, so stages never share a random stream."""
GENERATION_STRIDE = 7919
"""Prime step between the training seeds of consecutive generations."""


def attempt_seed(base_seed: int, generation: int, attempt: int) -> int:
    """``run.seed`` of an attempt: a SHA-256 mix of the project seed, generation and attempt (< 2**31)."""
    digest = hashlib.sha256(f"{base_seed}:{generation}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


class _Section(BaseModel):
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
    """``commander`` (the built-in pod) or ``openspiel:<game>``, any sequential OpenSpiel game (ml/game/registry.py)."""
    openspiel_params: dict[str, int | float | bool | str] = Field(default_factory=dict)
    """The OpenSpiel game's own parameters, e.g. ``{players: 4}`` for crazy_eights (unused by the commander)."""
    pod_size: int = Field(4, ge=2, le=6)
    """Players per pod (commander-pod.md: 2 to 6); for an OpenSpiel game it must equal the game's players."""
    max_turns: int = Field(30, ge=1)
    """Turn cap in rounds; at the cap the game is a draw for the players still in it (commander only)."""

    @model_validator(mode="after")
    def _check_game(self) -> GameParams:
        if self.name != "commander":
            from ml.game.registry import make_game  # lazy: loads pyspiel only for OpenSpiel games

            make_game(self)
        return self


class TeacherParams(_Section):
    games: int = Field(300, ge=1)
    """Heuristic-teacher pods to log (games); every seat's decisions are recorded."""
    mcts_simulations: int = Field(50, ge=1)
    """OpenSpiel games: MCTS simulations per teacher decision (the commander's teacher is the heuristic)."""
    mcts_rollouts: int = Field(1, ge=1)
    """OpenSpiel games: random rollouts per MCTS leaf evaluation."""
    mcts_uct_c: float = Field(2.0, gt=0)
    """OpenSpiel games: the UCT exploration constant of the MCTS teacher."""


class TrainParams(_Section):
    epochs: int = Field(6, ge=1)
    """Passes of ``samples_per_epoch`` sampled decisions each."""
    batch_size: int = Field(256, ge=1)
    """Decisions per gradient step."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate."""
    hidden_sizes: Annotated[tuple[int, ...], Field(strict=False)] = (256, 256)
    """Widths of the policy/value MLP trunk."""
    samples_per_epoch: int = Field(40_000, ge=1)
    """Decisions drawn (with replacement) from the source mixture per epoch."""
    holdout_fraction: float = Field(0.12, ge=0.10, le=0.15)
    """Share of teacher *games* held out for evaluation (issue 2: 10-15%, split by game)."""
    source_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=lambda: {"sim": 1.0, "ppo": 0.5})
    """Mixture ratios of the sampled training set per source; {sim: 1, ppo: 0.5} makes PPO a third."""
    min_reward_threshold: float = 0.0
    """PPO games whose ``episode_return`` is below this are dropped from training."""
    ppo_window: int = Field(0, ge=0)
    """Newest accepted PPO batches the student learns from (by generation); 0: all of them.
    Older batches come from weaker agents and dilute the newest (docs/measurements.md)."""
    init_checkpoint: str | None = None
    """Warm start: a checkpoint (repo-relative path) the student starts from instead of random weights (``--seed-checkpoint``)."""
    value_coef: float = Field(0.5, ge=0)
    """Weight of the value (game outcome) loss next to the imitation cross-entropy."""
    distill: Literal["kl", "hard"] = "kl"
    """PPO records with the agent's ``policy``: fit it by KL divergence (``kl``, Rusu et al. 2016) or the chosen action only (``hard``)."""

    @model_validator(mode="after")
    def _check_weights(self) -> TrainParams:
        if not any(w > 0 for w in self.source_weights.values()):
            raise ValueError(f"source_weights needs at least one weight > 0, got {self.source_weights}")
        return self


class SelfplayParams(_Section):
    total_steps: int = Field(200_000, ge=1)
    """PPO agent decisions collected in total (across all concurrent games)."""
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
    """Entropy bonus coefficient."""
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
    """Fixed pieces of each round, each with its own seed, shared out among the workers (ml/collect.py)."""
    opponent_mix: dict[str, float] = Field(default_factory=lambda: {"heuristic": 0.6, "frozen": 0.2, "self": 0.2})
    """Probability of each opponent kind per opponent seat: heuristic teacher, frozen earlier generation, current policy."""
    frozen_names: list[str] | None = None
    """Only these frozen opponents (file stems in data/frozen, e.g. ``gen002``); None: all. Set by a curriculum phase."""
    abort_if: AbortIf | None = None
    """Stop the attempt early when a training metric is below a bar after some PPO steps (set by a curriculum phase)."""

    @model_validator(mode="after")
    def _check_mix(self) -> SelfplayParams:
        unknown = set(self.opponent_mix) - {"heuristic", "frozen", "self", "random"}
        if unknown:
            raise ValueError(f"unknown opponent kinds {sorted(unknown)}; use heuristic, frozen, self, random")
        if not any(w > 0 for w in self.opponent_mix.values()):
            raise ValueError("opponent_mix needs at least one weight > 0")
        return self


class ExportParams(_Section):
    games: int = Field(300, ge=1)
    """Games the PPO agent plays (one seat, rotated) against the heuristic pool for export."""
    only_wins: bool = True
    """Export only the agent's decisions from games it won."""


class GateParams(_Section):
    gated: bool = True
    """Whether the verdict decides; an ungated attempt still measures and logs every figure but always advances."""
    opponent: Literal["heuristic", "random"] = "heuristic"
    """Reference players of the strength check: the game's teacher (default) or the uniform-random player."""
    target_win_rate: float = Field(0.35, gt=0, lt=1)
    """SPRT alternative H1: the PPO agent's first-place rate against heuristic teachers (H0 is parity, 1/pod size)."""
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
    max_accuracy_drop: float = Field(0.05, ge=0, le=1)
    """Accuracy drop on the teacher holdout that counts as a regression when McNemar's test confirms it.

    PPO decisions differ from the teacher's by design, so a student whose training set is a
    third PPO data imitates the teacher a little less: 2.5 points measured in generation 0
    (docs/measurements.md)."""
    student_games: int = Field(2000, ge=1)
    """Most pods of the student check's sequential test (games, seat-rotated duplicate deals; it stops earlier when decided)."""
    student_min_games: int = Field(200, ge=1)
    """Fewest decisive pods before the student check may decide (games)."""
    student_margin: float = Field(0.05, gt=0, lt=0.5)
    """Fall back rejected: the candidate student's first-place share among decisive pods at parity minus this (SPRT H0)."""

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


class Params(_Section):
    base: BaseParams = BaseParams()
    run: RunParams = RunParams()
    game: GameParams = GameParams()
    teacher: TeacherParams = TeacherParams()
    train: TrainParams = TrainParams()
    selfplay: SelfplayParams = SelfplayParams()
    export: ExportParams = ExportParams()
    gate: GateParams = GateParams()
    rating: RatingParams = RatingParams()
    loop: LoopParams = LoopParams()
    compute: ComputeParams = ComputeParams()
    curriculum: list[Phase] | None = None
    """Ordered phases of the run (ml/curriculum.py); None: one implicit phase of ``loop.max_generations``."""
    profiles: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    """Named sets of overrides (section -> key -> value), applied with ``loop.py --profile NAME``."""

    @model_validator(mode="after")
    def _check_target_above_parity(self) -> Params:
        if self.gate.target_win_rate <= (parity := 1.0 / self.game.pod_size):
            raise ValueError(
                f"gate.target_win_rate ({self.gate.target_win_rate}) must exceed parity 1/game.pod_size ({parity:.3f})"
            )
        return self

    @model_validator(mode="after")
    def _check_profiles(self) -> Params:
        for name, overrides in self.profiles.items():
            self._check_overrides(("profiles", name), f"profile {name!r}", overrides)
        return self

    @model_validator(mode="after")
    def _check_curriculum(self) -> Params:
        first: dict[str, int] = {}
        for i, phase in enumerate(self.curriculum or []):
            where = f"curriculum.{i} (phase {phase.name!r})"
            if (j := first.setdefault(phase.name, i)) != i:
                raise At(("curriculum", i), f"{where}: curriculum.{j} has the same name; phase names must differ")
            if i == 0 and phase.opponent == "previous_phase":
                raise At(("curriculum", i), f"{where}: opponent: previous_phase needs an earlier phase, and this is the first")
            self._check_overrides(("curriculum", i), where, phase_overrides(phase, None))
        return self

    def _check_overrides(self, loc: KeyPath, where: str, overrides: dict[str, dict[str, Any]]) -> None:
        """Raise ValueError (naming ``where``, each section and key) unless these params with ``overrides`` validate."""
        try:
            self.overridden(overrides)
        except ParamsError as e:
            raise At(loc, f"{where}: {e}") from None
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {message(err)}" for err in e.errors())
            raise At(loc, f"{where}: {problems}") from None

    def overridden(self, overrides: dict[str, dict[str, Any]]) -> Params:
        """These params with ``overrides`` (section -> key -> value) set, without profiles and curriculum.

        Raises:
            ParamsError: an override names an unknown section.
            pydantic.ValidationError: the result does not validate (an unknown key, a bad value).
        """
        raw = self.model_dump(mode="json", exclude={"profiles", "curriculum"})
        return Params.model_validate(with_overrides(raw, overrides))

    def stage_seed(self, stage: str) -> int:
        """Seed of a stage, ``<root> + STAGE_SEED_OFFSETS[stage]``.

        The root is ``base.seed`` for the teacher (generated once), ``base.seed`` plus
        ``GENERATION_STRIDE * run.generation`` for the student training (so a retry of a
        generation reuses its student and the gate's candidate student is trained with the
        same seed), and the attempt's ``run.seed`` for self-play, export and the gate, so a
        retry plays new games. ``eval`` (``loop.py eval``) roots at ``base.seed``: every
        generation's student is measured on the same deals, none of them played by any stage.

        Raises:
            KeyError: ``stage`` is not in ``STAGE_SEED_OFFSETS``.
        """
        if stage in ("teacher", "eval"):
            root = self.base.seed
        elif stage == "train":
            root = self.base.seed + GENERATION_STRIDE * self.run.generation
        else:
            root = self.run.seed
        return root + STAGE_SEED_OFFSETS[stage]


def with_overrides(raw: dict[str, Any], overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``raw`` (params as nested dicts) with ``overrides`` (section -> key -> value) set.

    Raises:
        ParamsError: an override names an unknown section.
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for section, values in overrides.items():
        if section not in Params.model_fields or section == "profiles":
            raise ParamsError(f"override names unknown section {section!r}")
        out.setdefault(section, {}).update(values)
    return out


def load_params(path: str | Path = DEFAULT_PARAMS_PATH) -> Params:
    """Read and validate ``params.yaml`` (``params_from_text``).

    Raises:
        ParamsError: missing file, bad YAML, a key written twice, unknown section or key, or a
            bad value; the message names the file, the line, the section and the key.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ParamsError(f"{path}: params file not found") from e
    return params_from_text(text, str(path))


def params_from_text(text: str, source: str = "params") -> Params:
    """Validate the YAML ``text`` of a params file (``ml.params_yaml.read_yaml``); raises ParamsError as ``load_params``."""
    raw, lines = read_yaml(text, source)
    return params_from_dict(raw or {}, source, lines)


def params_from_dict(raw: dict[str, Any], source: str = "params", lines: dict[KeyPath, int] | None = None) -> Params:
    """Validate a params mapping (as read from YAML), its profiles and curriculum phases included.

    Raises:
        ParamsError: as ``load_params``; one line per problem (``ml.params_yaml.error_lines``), the
            line of each where ``lines`` (key path -> line in ``source``, ``params_from_text``) has it.
    """
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: top level must be a mapping of sections")
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        raise ParamsError("\n".join(error_lines(e.errors(), source, raw, lines or {}))) from e
