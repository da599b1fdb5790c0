"""The README's examples run as written."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
# Ray's own notice on starting a cluster with its token authentication on (what feedline.service
# requires): information printed by Ray itself, not an error of the example.
RAY_NOTICES = ("Token authentication is enabled for this Ray cluster.",)
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_starts_with_exactly_two_setup_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["./dev demo", "./dev test"]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_in_its_own_interpreter_and_exits_quietly(
        index, tmp_path, skip_if_a_child_missed_an_optional_package):
    # Its own interpreter, as a user runs it: what happens at exit (objects finalized while
    # modules are torn down) is part of the example, and pytest would never see it.
    script = tmp_path / f"readme_example_{index}.py"
    script.write_text(BLOCKS[index])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    if done.returncode != 0:
        # An example of an optional extra (torch, Ray, OpenCV) where it is not installed:
        # free-threaded CPython has no wheels of some.
        skip_if_a_child_missed_an_optional_package(done.stderr)
    assert done.returncode == 0, done.stderr
    stderr = "".join(line for line in done.stderr.splitlines(keepends=True)
                     if not line.startswith(RAY_NOTICES))
    assert stderr == "", f"README example {index} wrote to stderr:\n{done.stderr}"
