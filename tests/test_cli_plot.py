# SPDX-License-Identifier: Apache-2.0
"""test_cli_plot.py — `kvpool sweep --plot` and the files a sweep writes.

Capacities are sorted (table, CSV and plot read left to right), the plot
frames its data (fitted y axis, no point on the frame, one tick format, the
unlimited ceiling drawn), gnuplot's own messages never reach the user,
nothing empty or partial is left behind, and what can be checked before the
sweep (gnuplot, output directories, a capacity to plot) is refused before
any replay runs (nothing on stdout).  The drawings are read back from SVG,
where gnuplot writes each point as a <use> at its pixel position.
"""
import csv
import json
import os
import re
import shutil

import pytest

from test_cli import KVPOOL, TAIL_FIRST, run, write_trace

pytestmark = pytest.mark.skipif(not KVPOOL.exists(), reason=f"{KVPOOL} not built")
need_gnuplot = pytest.mark.skipif(shutil.which("gnuplot") is None,
                                  reason="gnuplot not installed")


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "a_trace.jsonl", TAIL_FIRST)


def svg_frame(svg):
    """The plot frame's (x0, y0, x1, y1) in pixels: the closed border path."""
    m = re.findall(r"d='M([\d.]+),([\d.]+) L\1,([\d.]+) L([\d.]+),\3 L\4,\2 L\1,\2 Z", svg)
    x0, y0, y1, x1 = map(float, m[-1])
    return x0, y0, x1, y1


def svg_plot(svg, plot):
    """The SVG of gnuplot's plot number `plot` (its line, points and key entry)."""
    return svg.split(f'<g id="gnuplot_plot_{plot}"')[1].split('<g id="gnuplot_plot_')[0]


def svg_points(svg, plot=1):
    """Pixel positions of the points of plot number `plot`, in drawing order
    (the sample point of its key entry, on the key's line, left out)."""
    group = svg_plot(svg, plot)
    key_y = float(re.search(r"d='M[\d.]+,([\d.]+) L", group).group(1))
    uses = re.findall(r"<use xlink:href='#gpPt\d+' transform='translate\(([\d.]+),([\d.]+)\)",
                      group)
    return [(float(x), float(y)) for x, y in uses if float(y) != key_y]


def tick_labels(svg):
    """(x labels, y labels): the texts just below and just left of the frame."""
    x0, _, _, y1 = svg_frame(svg)
    xs, ys = [], []
    for x, y, anchor, text in re.findall(
            r'<g transform="translate\(([\d.]+),([\d.]+)\)"[^>]*text-anchor="(\w+)">\s*'
            r'<text>([^<]*)</text>', svg):
        if anchor == "end" and float(x) < x0:
            ys.append(text)
        elif anchor == "middle" and y1 < float(y) < y1 + 25:
            xs.append(text)
    return xs, ys


def sweep_rows(p):
    """(trace, capacity) of each row of the table on stdout."""
    return [tuple(line.split()[:2]) for line in p.stdout.splitlines()[2:]]


def test_capacities_are_sorted_in_table_and_csv(trace, tmp_path):
    out = tmp_path / "s.csv"
    p = run("sweep", trace, "--capacities", "8,0,1,4,2", "--csv", out)
    assert p.returncode == 0, p.stderr
    assert [c for _, c in sweep_rows(p)] == ["1", "2", "4", "8", "0"]
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert [r["capacity"] for r in rows] == ["1", "2", "4", "8", "0"]


@need_gnuplot
def test_plot_points_run_left_to_right_inside_the_frame(trace, tmp_path):
    svg = tmp_path / "s.svg"
    p = run("sweep", trace, "--capacities", "8,1,4,2", "--plot", svg)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    text = svg.read_text()
    x0, y0, x1, y1 = svg_frame(text)
    points = svg_points(text)
    assert len(points) == 4
    xs = [x for x, _ in points]
    assert xs == sorted(xs)  # no zig-zag
    for x, y in points:  # off the frame by a margin, never on it
        assert x0 + 5 < x < x1 - 5 and y0 + 5 < y < y1 - 5, (x, y, (x0, y0, x1, y1))


@need_gnuplot
def test_plot_y_axis_fits_the_data_and_ticks_share_one_format(trace, tmp_path):
    svg = tmp_path / "s.svg"
    assert run("sweep", trace, "--capacities", "1,2,4,8", "--plot", svg).returncode == 0
    x, y = tick_labels(svg.read_text())
    assert len(y) >= 4, y
    # hit rates here reach 7/13: the axis stops near it instead of at 1
    assert max(float(v) for v in y) < 0.7, y
    assert len({len(v.split(".")[1]) for v in y}) == 1, y  # same decimals on every tick
    assert x == ["1", "2", "4", "8"]  # a narrow range is labelled at the capacities


@need_gnuplot
def test_plot_tick_labels_never_switch_to_exponents(tmp_path):
    t = write_trace(tmp_path / "t.jsonl", TAIL_FIRST)
    svg = tmp_path / "s.svg"
    caps = "1,10,100,1000,10000,100000,1000000"
    assert run("sweep", t, "--capacities", caps, "--plot", svg).returncode == 0
    x, y = tick_labels(svg.read_text())
    assert "1,000,000" in x and "1,000" in x and "1" in x, x
    assert not any("e" in v for v in x + y), (x, y)


@need_gnuplot
def test_plot_draws_the_unlimited_ceiling(trace, tmp_path):
    svg = tmp_path / "s.svg"
    assert run("sweep", trace, "--capacities", "1,2", "--plot", svg).returncode == 0
    text = svg.read_text()
    unlimited = json.loads(run("replay", trace, "--capacity", "0", "--json").stdout)
    assert f"unlimited capacity: {unlimited['hit_rate']:.4f}" in text
    assert "stroke-dasharray" in svg_plot(text, 2)  # drawn dashed


@need_gnuplot
def test_single_capacity_plots_cleanly(trace, tmp_path):
    png = tmp_path / "one.png"
    p = run("sweep", trace, "--capacities", "4", "--plot", png)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""  # no "empty x range" from gnuplot
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capacity_zero_alone_is_refused_before_the_sweep(trace, tmp_path):
    png = tmp_path / "zero.png"
    p = run("sweep", trace, "--capacities", "0", "--plot", png)
    assert p.returncode == 2, p.stderr
    assert "--plot needs a capacity above 0" in p.stderr
    assert len(p.stderr.splitlines()) == 2  # the reason and the --help hint
    assert p.stdout == "" and not png.exists()


@pytest.mark.parametrize("option, name", [("--plot", "x.png"), ("--csv", "x.csv")])
def test_missing_output_directory_is_refused_before_the_sweep(trace, tmp_path, option, name):
    if option == "--plot" and shutil.which("gnuplot") is None:
        pytest.skip("gnuplot not installed")
    target = tmp_path / "no-such-dir" / name
    p = run("sweep", trace, "--capacities", "1,2", option, target)
    assert p.returncode == 1, p.stderr
    assert p.stdout == ""  # refused before the first replay
    assert f"{option} {target}: cannot create a file in" in p.stderr
    assert "No such file or directory" in p.stderr


def test_without_gnuplot_the_plot_is_refused_before_the_sweep(trace, tmp_path):
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    env = dict(os.environ, PATH=str(tmp_path / "nowhere"))
    p = run("sweep", trace, "--capacities", "2,4", "--csv", out, "--plot", png, env=env)
    assert p.returncode == 1, p.stderr
    assert "apt-get install gnuplot-nox" in p.stderr and "leave out --plot" in p.stderr
    assert p.stdout == ""
    assert not out.exists() and not png.exists()


def fake_gnuplot(tmp_path, body):
    """A `gnuplot` on PATH running the shell `body` (it may read the script on stdin)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "gnuplot"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


# gnuplot's shape of failing: it echoes the line, points at it, and says why,
# after opening (so creating, empty) its output file.
NOISY_FAILURE = r"""
out=$(sed -n 's/^set output "\(.*\)"$/\1/p')
: > "$out"
echo "gnuplot> plot '-' using 1:2" >&2
echo "                ^" >&2
echo "         line 0: all points y value undefined!" >&2
exit 1
"""


def test_gnuplot_failure_is_one_line_and_leaves_no_file(trace, tmp_path):
    env = fake_gnuplot(tmp_path, NOISY_FAILURE)
    png = tmp_path / "out" / "p.png"
    png.parent.mkdir()
    p = run("sweep", trace, "--capacities", "1,2", "--plot", png, env=env)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        f"kvpool: {png}: no plot drawn: all points y value undefined!"], p.stderr
    assert "gnuplot>" not in p.stderr and "^" not in p.stderr
    assert list(png.parent.iterdir()) == []  # neither an empty p.png nor a temporary file


def test_gnuplot_failure_keeps_the_previous_plot(trace, tmp_path):
    env = fake_gnuplot(tmp_path, NOISY_FAILURE)
    png = tmp_path / "p.png"
    png.write_bytes(b"previous plot")
    p = run("sweep", trace, "--capacities", "1,2", "--plot", png, env=env)
    assert p.returncode == 1
    assert png.read_bytes() == b"previous plot"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["a_trace.jsonl", "bin", "p.png"]


def test_gnuplot_that_draws_nothing_leaves_no_empty_file(trace, tmp_path):
    env = fake_gnuplot(tmp_path, "cat > /dev/null\nexit 0\n")
    png = tmp_path / "p.png"
    p = run("sweep", trace, "--capacities", "1,2", "--plot", png, env=env)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [f"kvpool: {png}: no plot drawn: gnuplot wrote nothing"]
    assert not png.exists()


@need_gnuplot
def test_rates_of_zero_sit_above_the_frame_without_negative_ticks(tmp_path):
    # no request shares a block with another: every hit rate is 0
    t = write_trace(tmp_path / "t.jsonl", [(1024, [2 * i, 2 * i + 1]) for i in range(20)])
    svg = tmp_path / "s.svg"
    assert run("sweep", t, "--capacities", "2,8,32", "--plot", svg).returncode == 0
    text = svg.read_text()
    x0, y0, x1, y1 = svg_frame(text)
    points = svg_points(text)
    assert len(points) == 3
    assert all(y0 < y < y1 - 5 for _, y in points), (points, (y0, y1))
    _, ys = tick_labels(text)
    assert ys and all(float(v) >= 0 for v in ys), ys


@need_gnuplot
@pytest.mark.parametrize("name", ["it''s", "a'b", 'say "hi"', "back\\slash", "%s%d"])
@pytest.mark.parametrize("command", ["sweep", "curve"])
def test_plot_titles_keep_quotes_and_backslashes(tmp_path, name, command):
    import html
    trace = write_trace(tmp_path / f"{name}.jsonl", TAIL_FIRST)
    other = write_trace(tmp_path / "other.jsonl", TAIL_FIRST)
    out = tmp_path / "p.svg"
    args = ("--capacities", "2,4") if command == "sweep" else ()
    p = run(command, trace, other, *args, "--plot", out)
    assert p.returncode == 0, p.stderr
    texts = [html.unescape(t) for t in re.findall(r"<text>([^<]*)</text>", out.read_text())]
    shown = name.replace("\\", "\\\\")  # as in tables: a backslash doubled
    assert any(shown in t for t in texts), texts


@need_gnuplot
def test_curve_plot_marks_the_target_names_the_trace_and_starts_at_zero(tmp_path):
    import html
    trace = write_trace(tmp_path / "one_trace.jsonl", TAIL_FIRST)
    out = tmp_path / "c.svg"
    p = run("curve", trace, "--target", "0.9", "--plot", out, "--json")
    assert p.returncode == 0, p.stderr
    reached = json.loads(p.stdout)["target"]["capacity"]
    svg = out.read_text()
    texts = [html.unescape(t) for t in re.findall(r"<text>([^<]*)</text>", svg)]
    assert any(t.endswith(": one_trace.jsonl") for t in texts), texts  # the title
    assert f"target reached at {reached}" in texts
    _, ys = tick_labels(svg)
    assert float(ys[0]) == 0  # hit rates from 0
    text = run("curve", trace, "--target", "0.9").stdout
    assert "target 0.9 of the unlimited hit rate (hit rate " in text


@need_gnuplot
@pytest.mark.parametrize("command", ["sweep", "curve"])
def test_several_traces_name_each_ceiling_and_keep_the_legend_small(tmp_path, command):
    import html
    traces = [write_trace(tmp_path / f"mk_{w}_trace.jsonl", TAIL_FIRST) for w in ("ab", "cd")]
    out = tmp_path / "c.svg"
    args = ("--capacities", "2,4,8") if command == "sweep" else ("--target", "0.5", "--mark", "3")
    p = run(command, *traces, *args, "--optimal", "--plot", out)
    assert p.returncode == 0, p.stderr
    svg = out.read_text()
    texts = [html.unescape(t) for t in re.findall(r"<text>([^<]*)</text>", svg)]
    ceilings = [t for t in texts if "unlimited capacity" in t]
    assert sorted(t.split(",")[0] for t in ceilings) == ["ab", "cd"], ceilings
    _, _, _, y1 = svg_frame(svg)
    height = float(re.search(r"height=\"(\d+)", svg).group(1))
    key_ys = [float(y) for y, t in re.findall(
        r'<g transform="translate\([\d.]+,([\d.]+)\)"[^>]*>\s*<text>([^<]*)</text>', svg)
        if float(y) > y1 + 30]
    assert key_ys and max(key_ys) - min(key_ys) < height / 5
