"""Answer columns built from buffers equal what ``pa.array`` builds, and never import pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from service.arrow_arrays import binary_array, string_array

REPO = Path(__file__).resolve().parents[2]

BINARY_CASES = [
    [],
    [None],
    [b""],
    [b"a", None, b"", b"\x00\xff" * 100, None],
    [None] * 9 + [b"x"],  # the validity bitmap's second byte
    [bytes([i]) * i for i in range(40)],
]


@pytest.mark.parametrize("items", BINARY_CASES, ids=lambda items: f"{len(items)}-items")
def test_binary_arrays_equal_pyarrows(items: list[bytes | None]) -> None:
    built = binary_array(items)
    built.validate(full=True)
    assert built.equals(pa.array(items, type=pa.binary()))
    assert built.null_count == items.count(None)


def test_string_arrays_are_utf8_and_equal_pyarrows() -> None:
    items = ["plain", None, "", "naïve ☃ 𝄞", None]
    built = string_array(items)
    built.validate(full=True)
    assert built.type == pa.string()
    assert built.equals(pa.array(items, type=pa.string()))
    assert built.to_pylist() == items


def test_an_arrow_answer_is_written_without_importing_pandas() -> None:
    # pa.array of a list imports pandas the first time (over a second of a stalled event loop).
    program = (
        "import sys, pyarrow as pa\n"
        "from service.arrow_arrays import binary_array, string_array\n"
        "table = pa.table({'key': binary_array([b'k1', b'k2']), 'value': binary_array([b'v', None]),"
        " 'text': string_array(['a', None])})\n"
        "sink = pa.BufferOutputStream()\n"
        "with pa.ipc.new_stream(sink, table.schema) as writer:\n"
        "    writer.write_table(table)\n"
        "assert sink.getvalue().size > 0\n"
        "print('pandas' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"
    control = subprocess.run(
        [sys.executable, "-c", "import sys, pyarrow as pa; pa.array([b'x']); print('pandas' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert control.stdout.strip() == "True"  # what the builders avoid (pandas is installed here)


def test_a_service_answering_an_arrow_batch_never_imports_pandas() -> None:
    # The whole request path in a fresh process: the body's keys decoded, values read, answered.
    result = subprocess.run(
        [sys.executable, "-m", "tests.service.arrow_answer_process"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "pandas imported: False"
