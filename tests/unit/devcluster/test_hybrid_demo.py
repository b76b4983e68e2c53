"""`make demo`'s outputs: the live table's rows, the CSV, and the plot of replicas per
pool and CPU over time (PNG, with the `demo` extra's matplotlib; the SVG is the form
docs/hybrid-node-pools.md embeds)."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

from vkpy.devcluster.hybrid_demo import HEADER, Sample, row, write_outputs

RUN = [
    Sample(0.0, 0.0, 2, 0, 0, 2, -1, 10),
    Sample(30.0, 0.45, 4, 2, 1, 7, 32, 10),
    Sample(60.0, 0.0, 2, 0, 0, 2, 2, 10),
]


def test_live_table_rows_line_up_with_the_header() -> None:
    assert HEADER.split() == ["t(s)", "load", "regular", "virtual", "pending", "desired",
                              "cpu%", "target%"]  # fmt: skip
    assert row(RUN[1]).split() == ["30", "0.45", "4", "2", "1", "7", "32", "10"]
    assert row(RUN[0]).split()[6] == "-"  # no CPU figure yet
    assert len(row(RUN[1])) == len(HEADER)


def test_demo_writes_the_samples_as_csv_and_a_plot(tmp_path: Path) -> None:
    written = write_outputs(RUN, tmp_path / "demo")
    names = [p.name for p in written]
    assert names == ["hybrid-burst.csv", "hybrid-burst.png", "hybrid-burst.svg"]
    with written[0].open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["seconds", "load_cores", "regular", "virtual", "pending", "desired",
                       "cpu_percent", "target_percent"]  # fmt: skip
    assert rows[2] == ["30.0", "0.45", "4", "2", "1", "7", "32", "10"]
    png = written[1].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert (width, height) == (800, 600)
    svg = written[2].read_text()
    for label in ("regular pool", "virtual node", "pending", "HPA CPU %", "replicas"):
        assert label in svg, label
