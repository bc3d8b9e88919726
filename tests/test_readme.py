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


def test_readme_python_example_runs():
    import subprocess
    import sys

    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    code += "\nassert loss.shape == (101,) and 0.0 <= float(best) <= 1.0\n"
    # a subprocess: the example enables x64 globally, which must not leak into other tests
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_install_lines_pin_the_published_versions():
    """The README installs with constraints.txt, which pins what decides the published numbers."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count('pip install -q -c constraints.txt -e ".[test,data,federated]"') >= 2
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.lower().replace("_", "-")] = version
    for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "ml-dtypes",
                 "scipy", "scikit-learn"):
        assert name in pins, f"constraints.txt does not pin {name}"
