# SPDX-License-Identifier: Apache-2.0
"""test_cli_output.py — where `--csv` and `--plot` write.

A regular file is replaced whole; a character device (/dev/null,
/dev/full) or a FIFO is written in place and stays what it is; a symbolic
link is followed (the file it names is written, the link stays) and a link
to nothing is refused; an output that is one of the input traces (the same
inode, by any name) is refused before any work, the trace unchanged; a
write error (/dev/full) is reported with exit status 1.
"""
import os
import shutil
import stat
import subprocess
import threading

import pytest

from test_cli import KVPOOL, TAIL_FIRST, run, write_trace

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")

CSV_START = "trace,capacity,"


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.jsonl", TAIL_FIRST)


def sweep(trace, *args):
    return run("sweep", trace, "--capacities", "2,4", *args)


def test_csv_to_dev_null_stays_a_device(trace):
    p = sweep(trace, "--csv", "/dev/null")
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_csv_to_dev_full_reports_the_write_error(trace):
    p = sweep(trace, "--csv", "/dev/full")
    assert p.returncode == 1
    assert "/dev/full" in p.stderr and "No space left" in p.stderr
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.parametrize("command", ["sweep", "curve"])
def test_csv_into_a_fifo_is_read_by_its_reader(trace, tmp_path, command):
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    args = ("--capacities", "2,4") if command == "sweep" else ()
    p = run(command, trace, *args, "--csv", fifo, timeout=60)
    reader.join(60)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    header = CSV_START if command == "sweep" else "capacity,"
    assert got and got[0].startswith(header) and got[0].count("\n") >= 3


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot not installed")
def test_plot_into_a_fifo_is_read_by_its_reader(trace, tmp_path):
    fifo = tmp_path / "out.svg"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    p = sweep(trace, "--plot", fifo)
    reader.join(60)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and "<svg" in got[0] and got[0].rstrip().endswith("</svg>")
    assert sorted(os.listdir(tmp_path)) == ["out.svg", "t.jsonl"]


def test_csv_through_a_symlink_writes_its_target(trace, tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target.name)
    p = sweep(trace, "--csv", link)
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text().startswith(CSV_START)


def test_csv_through_a_dangling_symlink_is_refused(trace, tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to("nowhere.csv")
    p = sweep(trace, "--csv", link)
    assert p.returncode == 1 and p.stdout == ""
    assert "symbolic link" in p.stderr
    assert link.is_symlink() and not (tmp_path / "nowhere.csv").exists()


@pytest.mark.parametrize("command", ["sweep", "curve"])
@pytest.mark.parametrize("how", ["same name", "symlink", "hard link", "stdin"])
def test_output_that_is_an_input_is_refused(trace, tmp_path, command, how):
    before = trace.read_bytes()
    out = trace
    if how == "symlink":
        out = tmp_path / "alias.jsonl"
        out.symlink_to(trace)
    elif how == "hard link":
        out = tmp_path / "hard.jsonl"
        os.link(trace, out)
    args = ("--capacities", "2,4") if command == "sweep" else ()
    src = "-" if how == "stdin" else trace
    with open(trace) as stdin:
        p = subprocess.run([str(KVPOOL), command, str(src), *args, "--csv", str(out)],
                           stdin=stdin, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == "", p.stderr
    assert "is also a trace" in p.stderr
    assert trace.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted({trace.name, out.name})


def test_plot_that_is_an_input_is_refused(tmp_path):
    trace = write_trace(tmp_path / "t.png", TAIL_FIRST)
    before = trace.read_bytes()
    p = run("sweep", trace, "--capacities", "2,4", "--plot", trace)
    assert p.returncode == 1 and p.stdout == ""
    assert "is also a trace" in p.stderr
    assert trace.read_bytes() == before


def test_csv_to_dev_stdout_follows_the_table(trace):
    p = sweep(trace, "--csv", "/dev/stdout")
    assert p.returncode == 0, p.stderr
    table, _, csv_text = p.stdout.partition(CSV_START)
    assert table.splitlines()[0].startswith("trace")
    assert csv_text.count("\n") == 3
