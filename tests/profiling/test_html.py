"""The HTML report: its content, its escaping, and its rendering in headless Chromium."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess

import numpy as np
import psutil
import pytest
from PIL import Image

from feedline.profiling.html import (
    BAR_COLOUR,
    BOTTLENECK_COLOUR,
    BUFFER_COLOURS,
    THROUGHPUT_COLOUR,
    render_html,
    write_html,
)
from feedline.profiling.records import (
    ConsumerStatistics,
    PipelineStatistics,
    ProfileReport,
    StageStatistics,
    TimelinePoint,
)

EVIL = 'map(<script>alert("x")</script>)'


def _polylines(page: str) -> list[list[str]]:
    return [m.split() for m in re.findall(r'<polyline points="([^"]*)"', page)]


def _rects(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<rect [^>]*width="([\d.]+)" height="18" fill="(#\w+)"', page)


def test_the_summary_bottleneck_and_advice(report):
    page = render_html(report)
    assert page.startswith("<!DOCTYPE html>\n")
    assert "<title>feedline profile: 156.0 elements/s</title>" in page
    assert "<dt>Throughput</dt><dd>156.0 elements/s</dd>" in page
    assert "<dt>Measured</dt><dd>312 elements in 2.00 s</dd>" in page
    assert ("<dt>Input-bound</dt><dd>yes (the consumer waited 60.7% of its time in next())</dd>"
            in page)
    assert ("<dt>Consumer</dt><dd>312 next() calls: 1.204 s waiting, 0.780 s between calls</dd>"
            in page)
    assert "<dt>Cores</dt><dd>2</dd>" in page
    assert "<li>a short run: 2.0 s measured</li>" in page
    assert ("<p><strong>map(decode_jpeg)</strong> (stage 3) takes 74.0% of the critical path's "
            "time; without it the pipeline would be 2.90× faster.</p>") in page
    advice = re.findall(r"<tr><td class=\"number\">(\d)</td><td>(.*?)</td><td><code>(.*?)</code>"
                        r"</td><td class=\"number\">(.*?)</td><td class=\"number\">(.*?)</td>",
                        page)
    assert advice == [
        ("1", ("run map(decode_jpeg) in processes: it holds the GIL 92% of its time, so its 4 "
               "threads run one at a time"),
         "map(decode_jpeg, num_parallel_calls=fl.AUTOTUNE, executor=&quot;processes&quot;)",
         "2.40×", "2.18×"),
        ("2", "map(augment) runs per batch already; vectorize map(decode_jpeg) after batch",
         ".batch(64).map(decode_jpeg_batch)", "1.15×", "not verified"),
    ]


def test_the_autotune_decisions(report):
    page = render_html(report)
    assert ('<tr><td class="number">0.75</td><td>map(decode_jpeg)</td><td>workers</td>'
            '<td class="number">4 → 3</td><td>4 workers used 1.6 cores of 2: one fewer keeps '
            "up</td></tr>") in page
    quiet = dataclasses.replace(report.statistics, tuning=())
    assert ("AUTOTUNE changed no setting while the pipeline was measured."
            in render_html(dataclasses.replace(report, statistics=quiet)))


def test_the_stage_table_has_every_field(report):
    page = render_html(report)
    table = page[page.index('<section id="stages">'):]
    headers = re.findall(r"<th>(.*?)</th>", table)
    names = [f.name for f in dataclasses.fields(StageStatistics)]
    assert headers == [name.replace("_", "_<wbr>") for name in names] + ["µs per element"]
    rows = re.findall(r"<tr( class=\"bottleneck\")?>(<td.*?)</tr>", table)
    cells = [dict(zip([*names, "per element"], re.findall(r"<td[^>]*>(.*?)</td>", row),
                      strict=True)) for _, row in rows]
    # Compared by field, so a field added to the record later only adds a column.
    assert cells[3] | EXPECTED_DECODE_ROW == cells[3]
    assert cells[1] | {"id": "1", "parent": "0", "name": "map(augment)", "self_seconds": "0.350",
                       "asynchronous": "no", "buffer_size": "—", "buffer_mean": "—",
                       "executor": "inline", "per element": "1,121.8"} == cells[1]
    assert cells[0]["parent"] == "—"
    # Only the bottleneck's row is marked.
    assert [bool(marker) for marker, _ in rows] == [False, False, False, True, False]


def test_numbers_are_formatted_by_the_fields_type(report):
    # Collection may hand over an int where the record declares a float (a 0 never summed).
    stages = list(report.statistics.stages)
    stages[4] = dataclasses.replace(stages[4], input_seconds=0, bytes=1234.4, buffer_mean=1)
    statistics = dataclasses.replace(report.statistics, stages=tuple(stages))
    page = render_html(dataclasses.replace(report, statistics=statistics))
    row = re.findall(r"<tr><td[^>]*>4</td>(.*?)</tr>", page)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[4:7] == ["1.2 kB", "0.580", "0.000"] and cells[11] == "100.0%"


EXPECTED_DECODE_ROW = {
    "id": "3", "parent": "2", "name": "map(decode_jpeg)", "operation": "map",
    "elements": "19,968", "bytes": "61.5 MB", "self_seconds": "5.520", "input_seconds": "0.610",
    "wait_seconds": "1.440", "parallelism": "4", "asynchronous": "yes", "buffer_size": "16",
    "buffer_mean": "4.7%", "executor": "threads", "per element": "276.4"}


def test_the_charts(report):
    page = render_html(report)
    # Self time: one bar per stage in pipeline order, the longest 570 px, the bottleneck red.
    assert _rects(page) == [("4.2", BAR_COLOUR), ("36.1", BAR_COLOUR), ("9.3", BAR_COLOUR),
                            ("570.0", BOTTLENECK_COLOUR), ("59.9", BAR_COLOUR)]
    for name in ("prefetch", "map(augment)", "batch", "map(decode_jpeg)",
                 "interleave(TFRecordDataset)"):
        assert f"<title>{name}</title>{name}</text>" in page
    assert "5.520 s (83.9%)" in page
    # Throughput: 40 intervals between 41 samples; the first holds 7 elements in 50 ms
    # (140/s at 25 ms), the second 9 (180/s, the top of the data; the axis goes to 200).
    throughput, prefetch, decode = _polylines(page)
    assert len(throughput) == 40
    assert throughput[:2] == ["87.2,77.2", "109.8,36.4"]
    assert f'stroke="{THROUGHPUT_COLOUR}"' in page
    assert "mean over the run (156.0 elements/s)" in page
    # Buffers: one line per buffered stage, 41 samples each, 50% is halfway up (118 px).
    assert len(prefetch) == len(decode) == 41
    assert prefetch[0] == "76.0,118.0" and decode[0] == "76.0,207.2"
    assert (f'<span class="swatch" style="background:{BUFFER_COLOURS[1]}"></span>'
            "map(decode_jpeg) (stage 3, 16 elements)") in page


def test_a_long_timeline_is_drawn_over_at_most_200_intervals(report):
    timeline = tuple(TimelinePoint(seconds=i * 0.05, elements=3 * i, buffers={})
                     for i in range(1001))
    statistics = dataclasses.replace(report.statistics, seconds=50.0, timeline=timeline)
    page = render_html(dataclasses.replace(report, statistics=statistics))
    (throughput,) = _polylines(page)
    assert len(throughput) == 200
    # 3 elements per 50 ms everywhere: a flat line at 60/s.
    assert len({point.split(",")[1] for point in throughput}) == 1
    assert "No buffer occupancy: no buffered stage was sampled." in page


def test_every_user_string_is_escaped(report):
    stages = list(report.statistics.stages)
    stages[1] = dataclasses.replace(stages[1], name=EVIL, executor="<b>x</b>")
    evil = dataclasses.replace(
        report,
        statistics=dataclasses.replace(report.statistics, stages=tuple(stages)),
        bottleneck=dataclasses.replace(report.bottleneck, stage=1, name=EVIL),
        advice=(dataclasses.replace(report.advice[0], message=f"parallelize {EVIL}",
                                    rewrite=f"{EVIL}.with_options(<o>)"),),
        notes=("<i>note</i> & more",))
    evil = dataclasses.replace(evil, statistics=dataclasses.replace(
        evil.statistics, tuning=(dataclasses.replace(
            report.statistics.tuning[0], stage=EVIL, setting="<u>", reason="<s>why</s>"),)))
    page = render_html(evil)
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    escaped = "map(&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;)"
    # The bottleneck, the advice (message, rewrite), the AUTOTUNE decision, the bar's label,
    # title and tooltip, the buffer-free stage table row.
    assert page.count(escaped) == 8
    assert f"<strong>{escaped}</strong>" in page
    assert f"<code>{escaped}.with_options(&lt;o&gt;)</code>" in page
    assert "<li>&lt;i&gt;note&lt;/i&gt; &amp; more</li>" in page
    assert "<td>&lt;b&gt;x&lt;/b&gt;</td>" in page
    assert "<td>&lt;u&gt;</td>" in page and "<td>&lt;s&gt;why&lt;/s&gt;</td>" in page
    assert "<u>" not in page and "<s>" not in page


def test_nothing_is_fetched(report):
    page = render_html(report)
    assert not re.search(r"""(src|href)\s*=""", page, re.IGNORECASE)
    for forbidden in ("http://", "https://", "<script", "<link", "<img", "<iframe", "@import",
                      "url("):
        assert forbidden not in page


def test_empty_sections_say_so_in_a_sentence(report):
    statistics = dataclasses.replace(report.statistics, timeline=())
    page = render_html(dataclasses.replace(report, statistics=statistics, bottleneck=None,
                                           advice=(), notes=(), input_bound=False))
    assert "<dd>no (the consumer waited 60.7% of its time in next())</dd>" in page
    assert "No bottleneck was found: no stage time was measured." in page
    assert "No advice: no rewrite is predicted to make this pipeline faster." in page
    assert "No throughput over time: the timeline has fewer than two samples." in page
    assert "No buffer occupancy: no buffered stage was sampled." in page
    assert page.count("<svg") == 1  # the self-time bars, all one colour without a bottleneck
    assert {colour for _, colour in _rects(page)} == {BAR_COLOUR}
    assert "the bottleneck in red" not in page and 'class="bottleneck"' not in page
    assert "<ul" not in page


def test_a_report_of_nothing_renders():
    nothing = PipelineStatistics(seconds=0.0, stages=(), consumer=ConsumerStatistics(0, 0, 0))
    page = render_html(ProfileReport(statistics=nothing, input_bound=False, bottleneck=None))
    assert "<dd>0.0 elements/s</dd>" in page and "<dd>0 elements in 0.00 s</dd>" in page
    assert "No stage time was measured." in page and "No stage was measured." in page
    assert "<svg" not in page
    one_sample = dataclasses.replace(
        nothing, timeline=(TimelinePoint(seconds=0.0, elements=0, buffers={0: 0.5}),))
    page = render_html(ProfileReport(statistics=one_sample, input_bound=False, bottleneck=None))
    assert "No throughput over time" in page
    assert len(_polylines(page)) == 1  # the one buffer, at one point
    assert "</span>stage 0</li>" in page  # a buffer of a stage the record does not list


def test_write_html(tmp_path, report):
    path = write_html(report, tmp_path / "out" / "report.html")
    assert path == tmp_path / "out" / "report.html"
    assert path.read_text(encoding="utf-8") == render_html(report)


# ------------------------------------------------------------------------ headless Chromium
CHROMIUM_SECONDS = 90


def _chromium() -> str:
    binary = shutil.which("chromium")
    if binary is None:
        if os.environ.get("FEEDLINE_REQUIRE_CHROMIUM"):
            pytest.fail("FEEDLINE_REQUIRE_CHROMIUM is set but no chromium is on PATH "
                        "(Debian: apt-get install chromium)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); "
                    "set FEEDLINE_REQUIRE_CHROMIUM=1 to fail instead of skipping")
    return binary


def _screenshot(page_path, png_path, scratch) -> None:
    """Render ``page_path`` with headless Chromium into ``png_path`` and check that every
    process it started has ended."""
    home = scratch / "home"
    home.mkdir()
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               # Containers often have a small /dev/shm; Chromium then crashes on big pages.
               "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
               "--force-device-scale-factor=1", f"--user-data-dir={scratch / 'profile'}",
               f"--screenshot={png_path}", "--window-size=1200,2000", page_path.as_uri()]
    # A home of its own keeps the crash handler's files out of the user's, and puts the
    # scratch path in every one of its processes' command lines, which finds them below.
    environment = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                   "XDG_CACHE_HOME": str(home / ".cache")}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=environment, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=CHROMIUM_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"chromium did not finish within {CHROMIUM_SECONDS} s")
    finally:
        # The crash handler leaves the session (setsid): find what is left by the scratch path.
        left = [p for p in psutil.process_iter(["cmdline", "status"])
                if p.info["status"] != psutil.STATUS_ZOMBIE
                and str(scratch) in " ".join(p.info["cmdline"] or ())]
        _, alive = psutil.wait_procs(left, timeout=10)
        for survivor in alive:
            survivor.kill()
    assert process.returncode == 0, output.decode(errors="replace")[-2000:]
    assert not alive, f"chromium processes left running: {[p.pid for p in alive]}"
    assert not [child for child in psutil.Process().children(recursive=True)
                if "chrom" in child.name()]


def _pixels_near(image: np.ndarray, colour: str, tolerance: int = 0) -> np.ndarray:
    """(x, y) of the pixels within ``tolerance`` of ``colour`` in every channel."""
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    ys, xs = np.nonzero(np.abs(image - target).max(axis=2) <= tolerance)
    return np.stack([xs, ys], axis=1)


def test_the_report_renders_in_headless_chromium(tmp_path, report):
    page = write_html(report, tmp_path / "report.html")
    png = tmp_path / "report.png"
    scratch = tmp_path / "chromium"
    scratch.mkdir()
    _screenshot(page, png, scratch)

    with Image.open(png) as screenshot:
        assert screenshot.size == (1200, 2000)
        image = np.asarray(screenshot.convert("RGB"), dtype=np.int16)
    colours, counts = np.unique(image.reshape(-1, 3), axis=0, return_counts=True)
    assert len(colours) > 100, "the screenshot is (nearly) one colour"
    white = counts[(colours == 255).all(axis=1)].sum()
    assert white < 0.97 * 1200 * 2000
    # Dark text: the headings, labels and tables were drawn.
    assert counts[colours.max(axis=1) < 80].sum() > 5000

    # The bottleneck's bar: a solid rectangle of 570 x 18 CSS pixels in its colour.
    red = _pixels_near(image, BOTTLENECK_COLOUR)
    assert len(red) > 0.95 * 570 * 18
    (left, top), (right, bottom) = red.min(axis=0), red.max(axis=0)
    assert 565 <= right - left + 1 <= 572 and 17 <= bottom - top + 1 <= 19
    # The other four bars: 4.2 + 36.1 + 9.3 + 59.9 px wide, 18 high, starting where it does.
    blue = _pixels_near(image, BAR_COLOUR)
    assert 0.85 * 109.5 * 18 < len(blue) < 1.05 * 109.5 * 18
    assert left - 1 <= blue[:, 0].min() and blue[:, 0].max() < left + 70
    # The lines (anti-aliased, so a tolerance): throughput below the bars, then the buffers,
    # each far more than its 10 x 10 legend swatch.
    orange = _pixels_near(image, THROUGHPUT_COLOUR, tolerance=12)
    assert len(orange) > 1500
    assert orange[:, 1].min() > bottom
    for colour in BUFFER_COLOURS[:2]:
        line = _pixels_near(image, colour, tolerance=12)
        assert len(line) > 400
        assert line[:, 1].min() > orange[:, 1].max()
