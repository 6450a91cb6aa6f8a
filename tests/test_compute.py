"""The ``local`` backend in processes (``ml.runtime.local_pool``, ``compute.workers``) gives the bits of
the in-process one: the teacher and export batch files and the gate's duplicate-deal outcomes after
an early stop; the chunks spread over the workers, which serve the next call, and a chunk's error
reaches the stage."""

from __future__ import annotations

import os
import time
from itertools import islice, pairwise
from pathlib import Path

import numpy as np
import pytest
import torch

from ml.base.jsonl import iter_jsonl, line_spans
from ml.config.sections import ComputeParams, ExportParams, RunParams, TeacherParams
from ml.data import encoded_cache
from ml.data.batch_files import RecordError
from ml.game.commander.spec import commander
from ml.judge.deals import duplicate_deal_outcomes
from ml.model.policy import PolicyNet
from ml.play.controller import Controller
from ml.play.export import export_batch
from ml.play.runner import StagePlay
from ml.play.teacher import write_teacher_batch
from ml.runtime.compute import make_executor
from ml.runtime.executor import LOCAL
from ml.runtime.local_pool import ProcessExecutor

pytestmark = pytest.mark.expensive  # worker processes


def _pid(task: int, offset: int) -> tuple[int, int]:
    time.sleep(0.05)  # a chunk's worth of work: each worker takes some
    return task + offset, os.getpid()


def _fail(task: int) -> int:
    if task == 3:
        raise ValueError(f"chunk {task} failed")
    return task


def test_workers_choose_the_executor() -> None:
    assert make_executor(ComputeParams(workers=1)) is LOCAL
    pool = make_executor(ComputeParams(workers=3))
    assert isinstance(pool, ProcessExecutor) and pool.slots == 3
    assert make_executor(ComputeParams()) is LOCAL  # the default: in process
    per_core = make_executor(ComputeParams(workers=0))  # 0: one per core
    assert per_core is LOCAL if (os.cpu_count() or 1) == 1 else per_core.slots == os.cpu_count()
    with pytest.raises(ValueError, match="at least 2 workers"):
        ProcessExecutor(1)


def test_chunks_run_in_the_workers_in_task_order() -> None:
    pool = ProcessExecutor(2)
    seen: list[int] = []
    out = pool.map(_pid, list(range(8)), pool.share(100), on_result=lambda i, _r: seen.append(i))
    assert [v for v, _ in out] == list(range(100, 108)) and seen == list(range(8))
    assert len({pid for _, pid in out} - {os.getpid()}) == 2  # both workers played, none of it here
    with pytest.raises(ValueError, match="chunk 3 failed"):
        list(pool.imap(_fail, range(6)))
    again = pool.map(_pid, [0, 1], pool.share(5))  # the same workers serve the next call
    assert {pid for _, pid in again} <= {pid for _, pid in out}
    pool.close()


def test_batches_and_gate_pods_in_processes_are_the_in_process_ones(tmp_path: Path) -> None:
    game = commander()
    torch.manual_seed(2)
    net = PolicyNet(game.obs_dim, (32,), game.num_actions)
    pool = ProcessExecutor(2)
    for name, ex in (("local", LOCAL), ("pool", pool)):
        write_teacher_batch(tmp_path / name, game, TeacherParams(games=10), "t", StagePlay(3, chunk_games=3, executor=ex))
        export_batch(net, tmp_path / name, ExportParams(games=12, only_wins=False), RunParams(), game,
                     StagePlay(5, chunk_games=5, executor=ex), num_envs=4)  # fmt: skip
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert len(files) == 2
    for f in files:
        assert (tmp_path / "local" / f).read_bytes() == (tmp_path / "pool" / f).read_bytes(), f
    outcomes = {}
    for name, ex in (("local", LOCAL), ("pool", pool)):
        deals = duplicate_deal_outcomes(Controller("net", net), Controller("teacher"), game=game, num_envs=4, seed=11,
                                        deals_per_chunk=3, executor=ex)  # fmt: skip
        outcomes[name] = list(islice(deals, 10))  # stops inside the fourth chunk: the chunks queued are cancelled
        deals.close()
    pool.close()
    assert outcomes["pool"] == outcomes["local"] and len(outcomes["local"]) == 10


def test_line_spans_cut_a_file_at_line_starts(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    lines = [f'{{"n": {i}, "pad": "{"x" * (i % 7)}"}}\n'.encode() for i in range(50)]
    path.write_bytes(b"".join(lines))
    starts = np.cumsum([0] + [len(x) for x in lines])
    for parts in (1, 2, 3, 7, 50, 80):
        spans = line_spans(path, parts)
        assert spans[0][0] == 0 and spans[-1][1] == path.stat().st_size and len(spans) <= parts
        assert all(a[1] == b[0] for a, b in pairwise(spans))  # consecutive, no gap
        for start, _end, first in spans:
            assert start == starts[first - 1]  # a line's start, numbered as iter_jsonl numbers it
        seen = [n for s in spans for n, _ in iter_jsonl(path, span=s)]
        assert seen == list(range(1, 51))


def test_a_large_file_parsed_in_pieces_gives_the_same_arrays_and_the_first_bad_line(tmp_path: Path, monkeypatch) -> None:
    game = commander()
    write_teacher_batch(tmp_path, game, TeacherParams(games=6), "t", StagePlay(3))
    path = next(tmp_path.iterdir())
    encoder = game.teacher_encoder(None)
    monkeypatch.setattr(encoded_cache, "SPLIT_BYTES", 0)  # every file is large
    pool = ProcessExecutor(2)
    whole = encoded_cache._encode_file(path, encoder, False, LOCAL)
    pieces = encoded_cache._encode_file(path, encoder, False, pool)
    assert len(whole.row) > 100 and (whole.row >= 0).sum() == len(whole.data)
    for name in ("game_id", "episode_return", "row", "skip_reason", "skip_detail"):
        a, b = getattr(whole, name), getattr(pieces, name)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name  # episode_return: nan where none
    for a, b in zip(whole.data._fields(), pieces.data._fields(), strict=True):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    text = path.read_bytes().split(b"\n")
    bad = [len(text) * 2 // 3, len(text) * 5 // 6]  # two bad lines in the later pieces
    for i in bad:
        text[i] = text[i].replace(b'"turn":', b'"turn":-', 1)
    path.write_bytes(b"\n".join(text))
    for ex in (LOCAL, pool):
        with pytest.raises(RecordError, match=rf":{bad[0] + 1}: turn"):
            encoded_cache._encode_file(path, encoder, False, ex)
    tolerant = [encoded_cache._encode_file(path, encoder, True, ex).bad_lines for ex in (LOCAL, pool)]
    pool.close()
    assert tolerant[0] == tolerant[1] and len(tolerant[0]) == 2
