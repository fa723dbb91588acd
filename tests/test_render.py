"""Every results README is the rendering of its results.json (benchmarks/render.py): none is written by hand."""

import pytest

from benchmarks.render import README_FILE, RESULTS_DIR, rendered, results_folders


@pytest.mark.parametrize("folder", results_folders(), ids=lambda p: str(p.relative_to(RESULTS_DIR)))
def test_readme_is_the_rendering_of_its_json(folder):
    assert (folder / README_FILE).read_text() == rendered(folder), (
        f"{folder / README_FILE} is not the rendering of its results.json: run python -m benchmarks.render {folder}"
    )


def test_every_results_folder_has_a_json():
    """A folder of results without results.json would have a README nobody can re-render."""
    with_readme = {p.parent for p in RESULTS_DIR.glob("*/README.md")}
    assert with_readme <= set(results_folders())
