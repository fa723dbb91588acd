"""Every results README is the rendering of its results.json (benchmarks/render.py): none is written by hand."""

import pytest

from benchmarks.render import README_FILE, RESULTS_DIR, main, rendered, results_folders, table


@pytest.mark.parametrize("folder", results_folders(), ids=lambda p: str(p.relative_to(RESULTS_DIR)))
def test_readme_is_the_rendering_of_its_json(folder):
    assert (folder / README_FILE).read_text() == rendered(folder), (
        f"{folder / README_FILE} is not the rendering of its results.json: run python -m benchmarks.render {folder}"
    )


def test_every_results_folder_has_a_json():
    """A folder of results without results.json would have a README nobody can re-render."""
    with_readme = {p.parent for p in RESULTS_DIR.glob("*/README.md")}
    assert with_readme <= set(results_folders())


def test_check_takes_a_folder_of_results_folders_and_names_one_without_results(tmp_path, capsys):
    """`render --check benchmarks/results` checks every folder under it (it raised FileNotFoundError)."""
    assert main(["--check", str(RESULTS_DIR)]) == 0
    with pytest.raises(SystemExit):
        main(["--check", str(tmp_path)])
    assert f"no results.json in or under {tmp_path}" in capsys.readouterr().err


def test_table_renders_a_column_list():
    """render.table, the one table renderer: keys or functions of the row; format names, format
    strings or functions; strings as they are; a failed row on request; leading left-aligned columns."""
    columns = [
        ["name", "label", None],
        ["ratio", "ratio", "{:.2f} x"],
        ["share", "share", "pct"],
        ["twice", lambda r: 2 * (r.get("ratio") or 0), lambda v: f"<{v}>"],
    ]
    rows = [
        {"label": "a", "ratio": 1.5, "share": 0.25},
        {"label": "b", "ratio": None, "share": "n/a"},
        {"label": "c", "error": "boom"},
    ]
    assert table(columns, rows, 1, failed=True).splitlines() == [
        "| name | ratio | share | twice |",
        "|---|---:|---:|---:|",
        "| a | 1.50 x | 25.0 | <3.0> |",
        "| b | — | n/a | <0> |",
        "| c | failed: boom | | |",
    ]
    assert table(columns[:1], rows[2:]).splitlines()[-1] == "| c |"
