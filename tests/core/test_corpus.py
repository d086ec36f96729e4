"""The corpus generator's noise audit: CPU the rest of the machine used while a run trained."""

from __future__ import annotations

import subprocess
import sys

from bench import corpus


def test_a_runs_own_cpu_is_not_counted_as_other_work() -> None:
    busy, own = corpus._busy_seconds(), corpus._children_cpu_seconds()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    used = corpus._children_cpu_seconds() - own
    assert used >= 0.5  # the child's CPU, reaped, is ours to subtract
    assert corpus._busy_seconds() - busy >= used - 0.05  # and the machine's busy time saw it (jiffies)
