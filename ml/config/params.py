"""The only reader of ``params.yaml``: one pydantic model per section (``ml.config.sections``).

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
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from ml.base.io import JSONObject
from ml.config.curriculum import Overrides, Phase, phase_overrides
from ml.config.sections import (
    BaseParams,
    ComputeParams,
    ExportParams,
    GameParams,
    GateParams,
    LoopParams,
    RatingParams,
    RunParams,
    SelfplayParams,
    TeacherParams,
    TrainParams,
    _Section,
)
from ml.config.yaml_file import At, KeyPath, ParamsError, dotted, error_lines, line_of, message, read_params_text, read_yaml

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
    """Ordered phases of the run (ml/config/curriculum.py); None: one implicit phase of ``loop.max_generations``."""
    profiles: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    """Named sets of overrides (section -> key -> value), applied with ``loop.py --profile NAME``."""

    @model_validator(mode="after")
    def _check_target_above_parity(self) -> Params:
        if self.gate.target_win_rate <= (parity := 1.0 / self.game.pod_size):
            raise At(
                ("gate", "target_win_rate"),
                f"gate.target_win_rate ({self.gate.target_win_rate}) must exceed parity 1/game.pod_size ({parity:.3f})",
            )
        return self

    @model_validator(mode="after")
    def _check_teacher_policy(self) -> Params:
        """``teacher.policy`` of a PettingZoo game is ``random`` or ``<module>:<callable>`` (it has no
        built-in heuristic); a ``<module>:<callable>`` teacher is for PettingZoo games only."""
        policy, pettingzoo = self.teacher.policy, self.game.name.startswith("pettingzoo:")
        if pettingzoo and policy != "random" and ":" not in policy:
            raise At(("teacher", "policy"), f"teacher.policy: {policy!r}: {self.game.name} has no built-in teacher; set teacher.policy "
                     "to random or <module>:<callable> (observation, mask -> action)")  # fmt: skip
        if not pettingzoo and ":" in policy:
            raise At(
                ("teacher", "policy"),
                f"teacher.policy: a <module>:<callable> teacher is for pettingzoo: games, not {self.game.name}",
            )
        if not pettingzoo and policy == "random":
            raise At(("teacher", "policy"), f"teacher.policy: random is for pettingzoo: games; {self.game.name}'s is uniform")
        return self

    @model_validator(mode="after")
    def _check_game_options(self) -> Params:
        """``game.observation`` is an OpenSpiel option, and so is ``gate.decide_by: nash_conv`` (whether the
        game is small enough is known once it is made: ``ml.game.checks``)."""
        openspiel = self.game.name.startswith("openspiel:")
        if self.game.observation != "observation" and not openspiel:
            raise At(
                ("game", "observation"),
                f"game.observation: {self.game.observation} is for OpenSpiel games, not {self.game.name}",
            )
        if self.gate.decide_by == "nash_conv" and not openspiel:
            raise At(
                ("gate", "decide_by"),
                f"gate.decide_by: nash_conv: exact NashConv judges two-player zero-sum OpenSpiel games, not {self.game.name}",
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
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {message(err, Params)}" for err in e.errors())
            raise At(loc, f"{where}: {problems}") from None

    def overridden(self, overrides: Overrides) -> Params:
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


def with_overrides(raw: JSONObject, overrides: Overrides) -> JSONObject:
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


Check = Callable[[Params], None]
"""A check of valid params that raises ``At`` at the key it refuses (``ml.game.checks.check_params``: the
game made from them). The loader runs it on the params, each profile and each curriculum phase."""


def load_params(path: str | Path = DEFAULT_PARAMS_PATH, check: Check | None = None) -> Params:
    """Read and validate ``params.yaml`` (``params_from_text``), then run ``check`` on it.

    Raises:
        ParamsError: missing or unreadable file, bytes that are not UTF-8 or not YAML characters,
            bad YAML, a key written twice, unknown section or key, or a bad value; the message
            names the file, the line (and column, for bad bytes and bad YAML), the section and the key.
    """
    path = Path(path)
    try:
        text = read_params_text(path)
    except FileNotFoundError as e:
        raise ParamsError(f"{path}: params file not found") from e
    return params_from_text(text, str(path), check)


def params_from_text(text: str, source: str = "params", check: Check | None = None) -> Params:
    """Validate the YAML ``text`` of a params file (``ml.config.yaml_file.read_yaml``); raises ParamsError as
    ``load_params``, and for a file with no sections (empty, blank or only comments: a cut or emptied
    file, which would otherwise run every stage on the code defaults).

    A text this process validated (and checked with ``check``) before is not read again: the
    result is a deep copy of the earlier one (a loop start reads params.yaml four times)."""
    params = _validated(text, source)[2]
    if check is not None:
        _checked(text, source, check)
    return params.model_copy(deep=True)


@lru_cache(maxsize=8)
def _validated(text: str, source: str) -> tuple[JSONObject, dict[KeyPath, int], Params]:
    """The data of ``text``, its key lines and its validated params (``params_from_text``; errors are not cached)."""
    raw, lines = read_yaml(text, source)
    if raw is None:
        raise ParamsError(
            f"{source}: no sections (the file is empty or holds only comments); restore it: git checkout {source}"
        )
    params = params_from_dict(raw, source, lines)  # raises for a top level that is not a mapping
    return raw, lines, params


@lru_cache(maxsize=8)
def _checked(text: str, source: str, check: Check) -> None:
    """``check`` on the params of ``text``, each profile and phase (``_run_check``); a pass is remembered."""
    raw, lines, params = _validated(text, source)
    _run_check(check, params, source, lines, raw)


def params_from_dict(
    raw: JSONObject, source: str = "params", lines: dict[KeyPath, int] | None = None, check: Check | None = None
) -> Params:
    """Validate a params mapping (as read from YAML), its profiles and curriculum phases included.

    Raises:
        ParamsError: as ``load_params``; one line per problem (``ml.config.yaml_file.error_lines``), the
            line of each where ``lines`` (key path -> line in ``source``, ``params_from_text``) has it;
            ``check``'s first refusal as ``<source>:<line>: <its text>`` (in a profile or a phase:
            ``<source>:<line>: profile '<name>': <its text>``).
    """
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: top level must be a mapping of sections")
    try:
        params = Params.model_validate(raw)
    except ValidationError as e:
        raise ParamsError("\n".join(error_lines(e.errors(), source, raw, lines or {}, Params))) from e
    if check is not None:
        _run_check(check, params, source, lines or {}, raw)
    return params


def _run_check(check: Check, params: Params, source: str, lines: dict[KeyPath, int], raw: dict[str, Any]) -> None:
    """``check`` on ``params``, then on each profile's and each phase's params; an ``At`` becomes a ParamsError
    at its line (in a profile or phase: the line of the overridden key, else of the profile or phase)."""
    runs: list[tuple[KeyPath, str, Params]] = [((), "", params)]
    runs += [(("profiles", name), f"profile {name!r}: ", params.overridden(ov)) for name, ov in params.profiles.items()]
    for i, phase in enumerate(params.curriculum or []):
        runs.append(
            (("curriculum", i), f"{dotted(('curriculum', i), raw)}: ", params.overridden(phase_overrides(phase, None)))
        )
    for loc, where, run in runs:
        try:
            check(run)
        except At as e:
            line = line_of(lines, (*loc, *e.loc)) if loc else line_of(lines, e.loc)
            raise ParamsError(f"{source}:{line}: {where}{e}" if line else f"{source}: {where}{e}") from None
