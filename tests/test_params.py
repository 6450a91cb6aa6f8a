"""``ml.config.params``: strict types, and profiles and curriculum phases validated when params load.

Checks: a boolean, a string or a float where an integer is meant, and an integer or a
string where a boolean is meant, are refused with the file, section and key named (an
integer is still a valid float, and a YAML list a valid ``hidden_sizes``); the repo's
params.yaml with every profile, and the tests' TINY params, load; a phase override with an
unknown key or a badly typed value, an unknown section, or a first phase that plays the
previous phase's model is refused at load, naming the phase (issue #12, item 12); a
profile's error names the profile; an unknown key is answered with its nearest field ("did
you mean 'epochs'?").

The walkthrough's items: non-finite floats (``.inf``) are refused everywhere, naming the key
(1); YAML 1.2 floats (``1e-3``, ``1E5``, ``-2.5e-4``) are numbers, in the loader and through the
writer (2); a key written twice is refused with file, line and key (3); errors name the line
(4); an override of the repo's params.yaml changes exactly one line, never re-wrapping
``profiles`` (6); duplicate phase names are refused naming both indices, and a phase-level
typo names the phase (7). Issue 24, item 4: a NUL, bytes that are not UTF-8, a tab where YAML
needs spaces and a control character are one line naming file, line and column, from the
reader and the writer alike, and a parser's error is one line too. Issue 42, item 14: an integer
too long for Python to read is one line naming file, line and key, from the reader, the writer and a stage;
item 15: a UTF-8 byte-order mark is read, kept by the writer and named by the hand edit's commit.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from ml.api.overrides import validate_overrides, write_overrides
from ml.config.params import ParamsError, load_params, params_from_dict
from ml.config.yaml_file import safe_yaml
from ml.driver.params_file import overrides_text
from tests.conftest import ROOT, tiny_params, yaml_text


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("train", "epochs", True, "valid integer"),
        ("train", "epochs", "6", "valid integer"),
        ("train", "epochs", 6.0, "valid integer"),
        ("teacher", "games", "40", "valid integer"),
        ("selfplay", "learner_decisions", 2000.5, "valid integer"),
        ("gate", "gated", 1, "valid boolean"),
        ("gate", "gated", "yes", "valid boolean"),
        ("export", "only_wins", 0, "valid boolean"),
        ("train", "lr", "0.001", "valid number"),
    ],
)
def test_strict_types_name_the_key(tmp_path: Path, section: str, key: str, value, message: str):
    p = tmp_path / "params.yaml"
    p.write_text(yaml_text({section: {key: value}}))
    with pytest.raises(ParamsError, match=rf"{p}:2: {section}\.{key}: .*{message}"):
        load_params(p)


def test_lax_where_it_is_exact():
    params = params_from_dict({"train": {"lr": 1, "hidden_sizes": [8, 4]}, "selfplay": {"opponent_mix": {"self": 1}}})
    assert params.train.lr == 1.0 and params.train.hidden_sizes == (8, 4) and params.selfplay.opponent_mix == {"self": 1.0}
    with pytest.raises(ParamsError, match=r"train\.hidden_sizes\.1: Input should be a valid integer"):
        params_from_dict({"train": {"hidden_sizes": [8, True]}})


def test_repo_profiles_and_tiny_params_load():
    params = load_params(ROOT / "params.yaml")  # each profile is validated on top of the file as it loads
    assert {"full", "ablation", "crazy_eights", "leduc_poker"} <= set(params.profiles)
    assert params.overridden(params.profiles["full"]).train.epochs == 8
    assert params_from_dict(tiny_params()).train.hidden_sizes == (32,)


def _phases(*overrides: dict, first: dict | None = None) -> dict:
    first = first or {"name": "warmup", "generations": 1, "gated": False}
    return {"curriculum": [first, *({"name": f"p{i}", "generations": 1, **o} for i, o in enumerate(overrides, 1))]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_phases({"overrides": {"selfplay": {"learner_decison": 500}}}), r"curriculum\.1 \(phase 'p1'\): selfplay\.learner_decison: unknown key; did you mean 'learner_decisions'\?"),
        (_phases({"overrides": {"selfplay": {"learner_decisions": "500"}}}), r"curriculum\.1 \(phase 'p1'\): selfplay\.learner_decisions: .*integer"),
        (_phases({"overrides": {"gate": {"min_games": 5000}}}), r"curriculum\.1 \(phase 'p1'\): .*min_games \(5000\) must not exceed"),
        (_phases({"overrides": {"nosuch": {"a": 1}}}), r"curriculum\.1 \(phase 'p1'\): override names unknown section 'nosuch'"),
        (_phases(first={"name": "g", "generations": 1, "opponent": "previous_phase"}), r"curriculum\.0 \(phase 'g'\): opponent"),
        (_phases({"generations": "2"}), r"curriculum\.1 \(phase 'p1'\): generations: Input should be a valid integer"),
        (_phases({"gatd": False}), r"params\.yaml: curriculum\.1 \(phase 'p1'\): gatd: unknown key; did you mean 'gated'\?"),
        (_phases({"name": "warmup"}), r"curriculum\.1 \(phase 'warmup'\): curriculum\.0 has the same name; phase names must differ"),
        ({"profiles": {"fast": {"train": {"epochz": 1}}}}, r"params\.yaml: profile 'fast': train\.epochz: unknown key; did you mean 'epochs'\?"),
    ],
)  # fmt: skip
def test_phase_and_profile_overrides_checked_at_load(raw: dict, message: str):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw, source="params.yaml")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("selfplay:\n  total_steps: 5000\n", r"2: selfplay\.total_steps: renamed; now 'learner_decisions' \(same meaning\)"),
        (
            "selfplay:\n  opponent_mix:\n    heuristic: 0.5\n    self: 0.5\n",
            r"2: selfplay: opponent kind 'heuristic' is now called 'teacher'",
        ),
        ("gate:\n  opponent: heuristic\n", r"2: gate\.opponent: 'heuristic' is now called 'teacher'"),
        (
            "profiles:\n  p:\n    selfplay: {total_steps: 10}\n",
            r"\d: profile 'p': selfplay\.total_steps: renamed; now 'learner_decisions'",
        ),
    ],
)
def test_former_names_answered_with_the_new_one(tmp_path: Path, text: str, line: str):
    """A key or value under a name it had before refuses in one line that names what it is called now."""
    with pytest.raises(ParamsError, match=rf"params\.yaml:{line}") as err:
        _load(tmp_path, text)
    assert "\n" not in str(err.value)


def _load(tmp_path: Path, text: str):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p, load_params(p)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("train:\n  lr: .inf\n", r"train\.lr"),
        ("train:\n  source_weights: {sim: .inf, ppo: 0.5}\n", r"train\.source_weights\.sim"),
        ("selfplay:\n  opponent_mix:\n    self: -.inf\n", r"selfplay\.opponent_mix\.self"),
        ("gate:\n  max_accuracy_drop: .nan\n", r"gate\.max_accuracy_drop"),
        (
            "curriculum:\n  - {name: a, generations: 1, abort_if: {below: .inf, at_steps: 5}}\n",
            r"curriculum\.0 \(phase 'a'\): abort_if\.below",
        ),
        ("profiles:\n  p: {rating: {prior_sigma_elo: .inf}}\n", r"profile 'p': rating\.prior_sigma_elo"),
    ],
)
def test_non_finite_floats_refused(tmp_path: Path, text: str, key: str):
    """Item 1: ``.inf`` was accepted for lr, source weights and the opponent mix."""
    with pytest.raises(ParamsError, match=rf"params\.yaml:\d+: {key}: .*finite number"):
        _load(tmp_path, text)


def test_yaml_12_floats(tmp_path: Path):
    """Item 2: PyYAML (YAML 1.1) read ``1e-3`` as a string, so ``lr: 1e-3`` was no number."""
    text = "train:\n  lr: 1e-3\n  min_reward_threshold: -2.5e-4\n  epochs: 6\nrating:\n  prior_sigma_elo: 1E5\n"
    p, params = _load(tmp_path, text)
    assert (params.train.lr, params.train.min_reward_threshold, params.rating.prior_sigma_elo) == (1e-3, -2.5e-4, 1e5)
    assert params.train.epochs == 6 and isinstance(params.train.epochs, int)  # integers stay integers
    assert (
        load_params(ROOT / "params.yaml").selfplay.learner_decisions
        == safe_yaml().load((ROOT / "params.yaml").read_text())["selfplay"]["learner_decisions"]
    )
    new, changed = overrides_text(p, {"train": {"epochs": 7}})  # the writer keeps and checks them the same way
    assert changed == ["train.epochs=7"] and new == text.replace("epochs: 6", "epochs: 7")


def test_key_written_twice(tmp_path: Path):
    """Item 3: the later ``epochs`` was used silently."""
    with pytest.raises(ParamsError, match=r"params\.yaml:4: train: key 'epochs' written twice \(first on line 2\)"):
        _load(tmp_path, "train:\n  epochs: 3\n  lr: 0.1\n  epochs: 4\n")
    with pytest.raises(ParamsError, match=r"params\.yaml:3: top level: key 'train' written twice"):
        _load(tmp_path, "train: {}\ngate: {}\ntrain: {}\n")


def test_errors_name_the_line(tmp_path: Path):
    """Item 4: the message had the file and the key, not the line."""
    text = (
        (ROOT / "params.yaml")
        .read_text()
        .replace("\ntrain:\n  epochs: 8\n", "\ntrain:\n  epochs: 0\n")
        .replace("  gated: true", "  gated: 1")
    )
    lines = text.splitlines()
    epochs, gated = lines.index("  epochs: 0") + 1, lines.index("  gated: 1") + 1
    with pytest.raises(ParamsError) as e:
        _load(tmp_path, text)
    assert str(e.value).splitlines() == [
        f"{tmp_path / 'params.yaml'}:{epochs}: train.epochs: Input should be greater than or equal to 1",
        f"{tmp_path / 'params.yaml'}:{gated}: gate.gated: Input should be a valid boolean",
    ]
    phase = "curriculum:\n  - name: a\n    generations: 1\n  - name: b\n    generations: 1\n    overrides: {gate: {min_games: 5000}}\n"
    with pytest.raises(ParamsError, match=r"params\.yaml:4: curriculum\.1 \(phase 'b'\): .*min_games \(5000\)"):
        _load(tmp_path, phase)  # a phase's problem: the line of the phase


def test_unknown_key_names_its_nearest_field(tmp_path: Path):
    """A typo of a key (``epocs``) or a section (``trian``) is answered with the nearest field of the
    model that holds it, on its line; a key near no field lists that model's fields."""
    text = (
        (ROOT / "params.yaml")
        .read_text()
        .replace("\ntrain:\n  epochs: 8\n", "\ntrain:\n  epocs: 3\n")
        .replace("\ngate:\n", "\ngaet:\n")
    )
    lines = text.splitlines()
    epocs, gaet = lines.index("  epocs: 3") + 1, lines.index("gaet:") + 1
    with pytest.raises(ParamsError) as e:
        _load(tmp_path, text)
    assert str(e.value).splitlines() == [
        f"{tmp_path / 'params.yaml'}:{epocs}: train.epocs: unknown key; did you mean 'epochs'?",
        f"{tmp_path / 'params.yaml'}:{gaet}: gaet: unknown key; did you mean 'gate'?",
    ]
    with pytest.raises(
        ParamsError, match=r"params\.yaml:2: export\.zzz: unknown key \(known: games, only_wins, explore, targets\)$"
    ):
        _load(tmp_path, "export:\n  zzz: 1\n")


def test_override_changes_one_line_of_the_repo_params(tmp_path: Path):
    """Item 6: the dashboard's override re-wrapped the ``profiles`` lines at ~80 columns."""
    p = tmp_path / "params.yaml"
    before = (ROOT / "params.yaml").read_text()
    p.write_text(before)
    assert write_overrides(p, validate_overrides({"train": {"epochs": 9}})) == ["train.epochs=9"]
    after = p.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [("  epochs: 8", "  epochs: 9")] and after.endswith("\n")


@pytest.mark.parametrize(
    "setting", ["train.epochs=9", "train.hidden_sizes=[64,64]", "profiles.full.selfplay.learner_decisions=9"]
)
def test_dvc_exp_run_set_param_changes_only_its_value(tmp_path: Path, setting: str):
    """Issue 42, item 3: ``dvc exp run -S train.epochs=2`` rewrote 58 lines of params.yaml (flow mappings
    re-wrapped at 80 columns, comments moved, ``[256, 256]`` turned into a block list). The file is now
    in the style DVC's writer (``dvc.utils.hydra.apply_overrides``) writes back: only the value changes."""
    from dvc.utils.hydra import apply_overrides

    p = tmp_path / "params.yaml"
    before = (ROOT / "params.yaml").read_text()
    p.write_text(before)
    apply_overrides(p, [setting])
    after = p.read_text()
    key, value = setting.rsplit("=", 1)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(after.splitlines()) == len(before.splitlines()) and changed
    assert all(
        b.strip() in (f"{key.rsplit('.', 1)[1]}: {value}", *(f"- {v}" for v in value.strip("[]").split(",")))
        for _, b in changed
    )
    assert safe_yaml().load(after) != safe_yaml().load(before)


EPOCHS = b"\ntrain:\n  epochs: 8\n"
"""The top-level ``train.epochs`` line of the repo's params.yaml (profiles have their own ``epochs: 8``)."""
BAD_BYTES = [  # (what replaces "  epochs: 8\n" of EPOCHS, column, the problem)
    (b"  epochs: 8\x00\n", 12, "a NUL byte (U+0000) is not allowed in YAML"),
    (b"  epochs: 8  # caf\xe9\n", 19, "not valid UTF-8 (byte 0xe9); save the file as UTF-8"),
    (b"\tepochs: 8\n", 1, "a tab character where YAML needs spaces (replace it with spaces)"),
    (b"  epochs: \x078\n", 11, "the control character U+0007 is not allowed in YAML"),
]


@pytest.mark.parametrize(("line", "col", "problem"), BAD_BYTES, ids=["nul", "latin1", "tab", "bell"])
def test_bad_bytes_name_line_and_column(tmp_path: Path, line: bytes, col: int, problem: str):
    """Issue 24, item 4: a NUL raised PyYAML's ReaderError (no file, a character position), bytes
    that are not UTF-8 a UnicodeDecodeError, each a traceback; a tab a message of five lines.
    Now one line, ``<file>:<line>:<col>: <problem>``, from the reader and from the writer alike."""
    text = (ROOT / "params.yaml").read_bytes()
    assert text.count(EPOCHS) == 1
    p = tmp_path / "params.yaml"
    p.write_bytes(text.replace(EPOCHS, b"\ntrain:\n" + line))
    lineno = text[: text.index(EPOCHS)].count(b"\n") + 3
    expected = f"{p}:{lineno}:{col}: {problem}"
    for read in (load_params, lambda p: overrides_text(p, {"train": {"epochs": 7}})):  # the writer reads with ruamel
        with pytest.raises(ParamsError) as e:
            read(p)
        assert str(e.value) == expected
    assert p.read_bytes() == text.replace(EPOCHS, b"\ntrain:\n" + line)  # nothing written


def test_bad_yaml_is_one_line(tmp_path: Path):
    """A parser's error names the line and column of the problem and the line of what it was parsing."""
    with pytest.raises(ParamsError) as e:
        _load(tmp_path, "train:\n  hidden_sizes: [32, 32\n  epochs: 3\n")
    assert str(e.value) == (
        f"{tmp_path / 'params.yaml'}:3:9: not valid YAML: expected ',' or ']', but got ':'"
        " (while parsing a flow sequence from line 2)"
    )


@pytest.mark.parametrize("text", ["", "\n\n", "   \n", "# all of it commented out\n# train:\n"])
def test_a_file_with_no_sections_is_refused_by_reader_and_writer(tmp_path: Path, text: str):
    """An emptied or cut params.yaml ran every stage on the code defaults and crashed the writer
    (``'NoneType' object has no attribute 'get'``); now both refuse it in one line, writing nothing."""
    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ParamsError, match=r"params\.yaml: no sections \(the file is empty or holds only comments\)"):
        load_params(p)
    with pytest.raises(ParamsError, match=r"params\.yaml: top level must be a mapping of sections"):
        overrides_text(p, {"train": {"epochs": 7}})
    assert p.read_text() == text


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("teacher:\n  policy: cfr\n", 2, "teacher.policy 'cfr' is for OpenSpiel games"),
        (
            "game:\n  name: openspiel:go\n  pod_size: 2\nteacher:\n  policy: cfr\ngate:\n  target_win_rate: 0.6\n",
            5,
            "more than 200000 histories",
        ),
        ("gate:\n  decide_by: nash_conv\n", 2, "gate.decide_by: nash_conv: exact NashConv judges two-player zero-sum"),
        (
            "game:\n  name: openspiel:tic_tac_toe\n  pod_size: 2\ngate:\n  decide_by: nash_conv\n  target_win_rate: 0.6\n",
            5,
            "more than 100000 states",
        ),
        ("game:\n  observation: information_state\n", 2, "game.observation: information_state is for OpenSpiel games"),
        ("export:\n  targets: teacher\n", 2, "export.targets: teacher needs a teacher that keeps a distribution"),
        (
            "game:\n  name: openspiel:kuhn_poker\n  pod_size: 2\nexport:\n  targets: teacher\ngate:\n  target_win_rate: 0.6\n",
            5,
            "(teacher.policy uniform, ismcts, cfr), not heuristic",
        ),
        (
            "game:\n  name: openspiel:tic_tac_toe\n  pod_size: 2\ngate:\n  alpha: 0.05\n",
            4,
            "gate.target_win_rate (0.35) must exceed",
        ),
    ],
)
def test_options_a_game_cannot_take_are_refused_at_load_naming_the_line(tmp_path: Path, text: str, line: int, message: str):
    """Refused when params load at a door that starts work (``check_params``: the game made), before any stage runs."""
    from ml.game.checks import check_params

    p = tmp_path / "params.yaml"
    p.write_text(text)
    with pytest.raises(ParamsError) as err:
        load_params(p, check=check_params)
    said = str(err.value)
    assert said.startswith(f"{p}:{line}: ") and message in said and len(said.splitlines()) == 1, said


def test_an_integer_too_long_to_read_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Issue 42, item 14: a 5001-digit integer ended in a 46-line traceback (Python's limit on integer
    conversion, ``sys.get_int_max_str_digits``, inside the YAML reader). Now one line naming the file,
    line and key, from the reader, the writer and a stage alike; nothing written."""
    from ml.runtime.cli import stage_setup

    text = (ROOT / "params.yaml").read_text()
    assert text.count(EPOCHS.decode()) == 1
    p = tmp_path / "params.yaml"
    p.write_text(text.replace(EPOCHS.decode(), f"\ntrain:\n  epochs: {'9' * 5001}\n"))
    lineno = text[: text.index(EPOCHS.decode())].count("\n") + 3
    expected = f"{p}:{lineno}: train.epochs: an integer of 5001 digits is too long to read (at most 4300)"
    for read in (load_params, lambda p: overrides_text(p, {"train": {"epochs": 7}})):
        with pytest.raises(ParamsError) as e:
            read(p)
        assert str(e.value) == expected
    with pytest.raises(SystemExit) as exit_:
        stage_setup("train", "", ["--params", str(p)], lambda parser: None)
    assert exit_.value.code == 2 and capsys.readouterr().err == f"error: {expected}\n"
    assert p.read_text() == text.replace(EPOCHS.decode(), f"\ntrain:\n  epochs: {'9' * 5001}\n")


class _EditedRepo:
    """What ``ml.driver.params_edit`` needs of the loop, over a folder: HEAD's params.yaml is ``head``,
    the work tree's is the file, and a commit is recorded instead of made."""

    def __init__(self, root: Path, head: bytes) -> None:
        self.root, self.head, self.said, self.commits = root, head, [], []
        self.echo = self.said.append

    def path(self, rel: Path | str) -> Path:
        return self.root / rel

    def head_bytes(self, rel: str) -> bytes | None:
        return self.head

    def uncommitted_log(self, state) -> bool:
        return False

    def tree_changes(self) -> tuple[list[str], list[str]]:
        return [], ["params.yaml"] if self.path("params.yaml").read_bytes() != self.head else []

    @contextlib.contextmanager
    def committing(self, message: str, paths: list[str], dvc_add: tuple[str, ...] = ()):
        yield {}
        self.commits.append(message)

    def seam(self, name: str) -> None:
        pass


@pytest.mark.parametrize("edit", [{}, {"epochs": 7}], ids=["bom-only", "bom-and-a-value"])
def test_a_byte_order_mark_is_read_and_named_in_the_commit_and_kept_by_the_writer(tmp_path: Path, edit: dict):
    """Issue 42, item 15: a UTF-8 byte-order mark added to params.yaml was committed by the loop as
    ``params.yaml edited by hand (no value changed)`` and dropped again, unsaid, by the next attempt's
    rewrite. YAML reads past it, and so does the loop: the commit and the line the loop prints name it,
    the in-flight refusal names it, and the loop's rewrites keep it."""
    from ml.driver.params_edit import commit_params_edit, in_flight_edit_refusal
    from ml.driver.params_file import attempt_params_text, attempt_text
    from ml.driver.state import InFlight, LoopState

    head = (ROOT / "params.yaml").read_bytes()
    p = tmp_path / "params.yaml"
    edited = head.replace(EPOCHS, b"\ntrain:\n  epochs: 7\n") if edit else head
    p.write_bytes(b"\xef\xbb\xbf" + edited)
    repo = _EditedRepo(tmp_path, head)
    values = "train.epochs 8 -> 7, " if edit else ""
    subject = f"params: {values}byte-order mark added" + ("" if edit else " (no value changed)")
    assert commit_params_edit(repo, LoopState()) == subject
    assert [m.splitlines()[0] for m in repo.commits] == [subject] and "U+FEFF" in repo.commits[0]
    assert repo.said == [
        f"committed your edit of params.yaml: {subject}; a byte-order mark is the invisible U+FEFF some editors "
        "write first: YAML, DVC and the loop read past it, and the loop keeps it"
    ]
    assert attempt_params_text(p, 1, 1).startswith("\ufeff# ") and load_params(p).train.epochs == (7 if edit else 8)
    flight = InFlight(attempt_id="gen000-a1", generation=0, attempt=1, params_sha256="", started_at="")
    p.write_text("\ufeff" + attempt_text(head.decode(), "params.yaml", 0, 1))  # what the loop wrote, and a BOM
    refused = in_flight_edit_refusal(_EditedRepo(tmp_path, head), flight)
    assert "is in flight (byte-order mark added);" in refused, refused
    assert "git commit -m 'params: byte-order mark added (no value changed)' params.yaml" in refused, refused
    p.write_bytes(head)
    assert not attempt_params_text(p, 1, 1).startswith("\ufeff")
