"""``python -m reports.readme_tables``: the headline tables it makes of published folders,
checked on hand-made tables and README files (README.md itself now holds the glance block
of ``python -m reports.glance`` instead)."""

from __future__ import annotations

import pytest

from reports import readme_tables
from reports.render.table import Cell, Table


def _table(*rows):
    return Table("t", "t", ("Model", "Batch", "a", "b", "c", "Equiv."),
                 tuple(tuple(Cell(t) for t in row) for row in rows))


def test_only_models_two_frameworks_measured_are_kept():
    table = _table(("m1", "16", "1.00 (jit)", "—", "2.00 (eager)", "✓"),
                   ("m2", "16", "1.00 (jit)", "unsupported [1]", "—", "—"),
                   ("m3", "16", "failed [2]", "3.00 (graph)", "—", "—"))
    kept = readme_tables.compared_rows(table, frameworks=3)
    assert [row[0].text for row in kept.rows] == ["m1"]
    assert readme_tables.compared_rows(_table(("m2", "16", "1.0", "—", "—", "—")), 3) is None


def test_the_single_layer_sweep_stays_out_of_the_front_page():
    table = _table(("conv:c=3,i=128,f=64,k=11,s=1", "64", "1.00 (jit)", "—", "2.00 (eager)", "✓"),
                   ("conv_l1", "128", "1.00 (jit)", "—", "2.00 (eager)", "✓"))
    kept = readme_tables.compared_rows(table, frameworks=3)
    assert [row[0].text for row in kept.rows] == ["conv_l1"]


@pytest.mark.parametrize("text", ["no markers\n",
                                  f"{readme_tables.END}\n{readme_tables.BEGIN}\n",
                                  f"{readme_tables.BEGIN}\n{readme_tables.BEGIN}\n"
                                  f"{readme_tables.END}\n"])
def test_a_readme_without_one_ordered_pair_of_markers_is_refused(tmp_path, text, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    assert readme_tables.main(["--readme", str(readme)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert readme.read_text() == text


def test_an_unknown_folder_is_named(tmp_path, capsys):
    assert readme_tables.main([str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
