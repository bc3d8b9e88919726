"""README.md stays true: its paper table is the registry's, its commands are the CI's."""

import pathlib
import re

from jaxpapers import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_paper_table_is_generated_from_registry():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- papers:start -->\n(.*?)\n<!-- papers:end -->", text, re.S)
    assert m, "README.md lacks the generated papers table markers"
    assert m.group(1).strip() == cli.markdown_status_table().strip(), (
        "README table is stale: regenerate it with `jaxpapers list --markdown`")


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    block = re.search(r"# --- README: \"Run the tests\".*?\n(.*?)\n# --- end ---", ci, re.S)
    assert block
    for line in block.group(1).splitlines():
        assert line.strip() in readme, f"CI line not in README: {line}"
