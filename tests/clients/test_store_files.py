"""A store read whole is shared by the workers of a machine through one file per planned lookup: read
from the service once, the same answers in every worker (real service, Arrow only, no Spark)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from clients import StatestoreClient
from clients import store_files as files
from clients.lookup import Lookup, LookupSpec, whole_stores
from clients.spark.tasks import JoinStep, join_task
from tests.clients.test_whole_store import (
    MOST,
    Requests,
    as_rows,
    model,
    pages,
    served,
    spec_of,
)
from tests.support.together import together

__all__ = ["served"]  # the fixture, used by name

Served = tuple[str, dict[bytes, bytes]]


def in_new_worker(spec: LookupSpec, batches: list[list[str | None]]) -> tuple[list[object], Requests, Lookup]:
    """``batches`` looked up as by a task in another Python worker (nothing kept in this process)."""
    whole_stores.clear()
    requests = Requests()
    with StatestoreClient(spec.options, transport=requests) as client, Lookup(spec, client) as lookup:
        results = [as_rows(lookup.lookup(pa.array(keys, pa.string()))) for keys in batches]
    return results, requests, lookup


def test_the_workers_of_a_machine_read_a_store_whole_once(served: Served, private_store_files: Path) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    first, reads, reader = in_new_worker(spec, [MOST])
    second, loads, loader = in_new_worker(spec, [MOST, ["k001", "nope", None]])
    assert first == [model(MOST, table)]
    assert second == [model(MOST, table), model(["k001", "nope", None], table)]
    assert reads.counts == (0, pages(len(table)))
    assert loads.counts == (0, 0)  # nothing asked of the service
    assert (reader.keys_scanned, reader.keys_loaded) == (len(table), 0)
    assert (loader.keys_scanned, loader.keys_loaded) == (0, len(table))
    assert [path.suffix for path in private_store_files.iterdir()].count(".arrow") == 1


def test_another_planned_lookup_or_position_reads_for_itself(served: Served) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    in_new_worker(spec, [MOST])
    for other in (dataclasses.replace(spec, lookup_id="job-2"), dataclasses.replace(spec, position="0:300")):
        _, requests, _ = in_new_worker(other, [MOST])
        assert requests.counts[1] > 0
    # Without a planned lookup (no id) nothing is shared.
    for _ in range(2):
        _, requests, _ = in_new_worker(spec_of(url, store_keys=320), [MOST])
        assert requests.counts == (0, pages(len(table)))


def test_tasks_starting_together_read_the_store_once(served: Served) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    whole_stores.clear()

    def task(start: threading.Barrier) -> tuple[object, Requests]:
        requests = Requests()
        with StatestoreClient(spec.options, transport=requests) as client, Lookup(spec, client) as lookup:
            start.wait()
            return as_rows(lookup.lookup(pa.array(MOST, pa.string()))), requests

    answers, counted = zip(*together(3, task), strict=True)
    assert list(answers) == [model(MOST, table)] * 3
    assert sum(requests.pages for requests in counted) == pages(len(table))
    assert sum(requests.batch_gets for requests in counted) == 0


def test_a_store_too_large_for_one_worker_is_not_tried_by_the_others(served: Served) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1", scan_bytes=3000)
    first, reads, _ = in_new_worker(spec, [MOST])
    second, gets, _ = in_new_worker(spec, [MOST])
    assert first == second == [model(MOST, table)]
    assert reads.pages == 2  # stopped at the bound
    assert gets.pages == 0
    assert gets.batch_gets == reads.batch_gets > 0


def test_an_unreadable_file_makes_the_worker_read_the_store_itself(
    served: Served, private_store_files: Path
) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    in_new_worker(spec, [MOST])
    (path,) = private_store_files.glob("*.arrow")
    path.write_bytes(b"ARROW1 but not an Arrow file")
    again, requests, lookup = in_new_worker(spec, [MOST])
    assert again == [model(MOST, table)]
    assert requests.counts == (0, pages(len(table)))
    assert lookup.keys_loaded == 0
    # ... and shares its own read again.
    _, requests, _ = in_new_worker(spec, [MOST])
    assert requests.counts == (0, 0)


def test_a_file_of_another_value_type_is_not_taken(served: Served, private_store_files: Path) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    in_new_worker(spec, [MOST])
    (path,) = private_store_files.glob("*.arrow")
    other = pa.table({"key": [b"k001"], "value": ["text"], "found": [True], "misfit": [False]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, other.schema) as writer:
        writer.write_table(other)
    again, requests, _ = in_new_worker(spec, [MOST])
    assert again == [model(MOST, table)]
    assert requests.pages == pages(len(table))


def test_a_directory_others_can_read_is_not_used(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, table = served
    shared = tmp_path / "open"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv(files.DIR_VARIABLE, str(shared))
    assert files.share_dir() is None
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    for _ in range(2):
        answers, requests, _ = in_new_worker(spec, [MOST])
        assert answers == [model(MOST, table)]
        assert requests.pages == pages(len(table))
    assert list(shared.iterdir()) == []


def test_a_new_directory_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.DIR_VARIABLE, str(tmp_path / "new"))
    directory = files.share_dir()
    assert directory == tmp_path / "new"
    assert directory.stat().st_mode & 0o777 == 0o700


def test_old_files_and_the_oldest_beyond_the_bytes_are_removed(tmp_path: Path) -> None:
    now = time.time()
    for name, age, size in [("old.arrow", 2 * files.FILE_TTL, 10), ("a.lock", 2 * files.FILE_TTL, 0),
                            ("b.arrow", 30, 400), ("c.arrow", 20, 400), ("d.arrow", 10, 400)]:  # fmt: skip
        path = tmp_path / name
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age, now - age))
    files.prune(tmp_path, 1000, keep=tmp_path / "b.arrow")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["b.arrow", "d.arrow"]


def test_a_task_reads_first_a_store_no_other_worker_is_reading(served: Served) -> None:
    url, table = served
    products = spec_of(url, store_keys=320, lookup_id="job-1")
    others = dataclasses.replace(products, lookup_id="job-2")  # the same store, as a second dimension
    requests = Requests()
    with StatestoreClient(products.options, transport=requests) as client:
        whole_stores.clear()
        with Lookup(products, client) as first, Lookup(others, client) as second:
            held = first._file
            assert held is not None
            with held.claimed(wait=True):  # another worker is reading the first store
                first.prefetch(pa.array(MOST, pa.string()))
                assert requests.pages == 0
                second.prefetch(pa.array(MOST, pa.string()))
                assert requests.pages == pages(len(table))
            assert (first.keys_scanned, second.keys_scanned) == (0, len(table))
            assert as_rows(first.lookup(pa.array(MOST, pa.string()))) == model(MOST, table)
            assert first.keys_scanned == len(table)


def test_a_join_task_answers_the_same_with_files_shared(served: Served) -> None:
    url, table = served
    spec = spec_of(url, store_keys=320, lookup_id="job-1")
    second = dataclasses.replace(spec, lookup_id="job-2")
    steps = [JoinStep(spec, 0, "left", None), JoinStep(second, 0, "inner", None)]
    names = ["k", "name", "price", "name2", "price2"]
    batch = pa.record_batch([pa.array(MOST, pa.string())], names=["k"])
    outputs = []
    for _ in range(2):
        whole_stores.clear()
        outputs.append(pa.Table.from_batches(list(join_task(steps, 1, names)(iter([batch])))).to_pylist())
    rows = model(MOST, table)
    expected = [
        {"k": key, "name": (value or {}).get("name"), "price": (value or {}).get("price"),
         "name2": (value or {}).get("name"), "price2": (value or {}).get("price")}
        for key, (value, found, _) in zip(MOST, rows, strict=True) if found
    ]  # fmt: skip
    assert outputs == [expected, expected]
