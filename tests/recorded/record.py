"""Record a bundled cluster's Slurm output for the parsers' tests: ``python tests/recorded/record.py 26.05``
(as root, with the release's cluster up: deploy/minicluster up RELEASE). Each file is what the money
path's own command prints there (the same argv as slurm_yolo.slurm.commands), so a new release's
changes show as a test failing on its recording. It makes its own jobs and the probe account
``enf_probe`` (an account of that cluster alone), and writes tests/recorded/RELEASE/."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from slurm_yolo.slurm import parsers, queries

MARKERS = Path("/var/lib/slurm-yolo-cluster/clusters")
HERE = Path(__file__).resolve().parent


def main(release: str) -> None:
    marker = json.loads((MARKERS / f"{release}.json").read_text())
    bin_dir, cluster = Path(marker["bin_dir"]), marker["cluster"]
    out = HERE / release
    out.mkdir(exist_ok=True)

    def slurm(*argv: str, check: bool = True, time_format: str = "standard") -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": time_format}
        return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True, check=check, env=env)

    def submit(*args: str) -> int:
        return parsers.sbatch_job_id(slurm("sbatch", "--parsable", *args).stdout)

    def write(name: str, text: str) -> None:
        (out / name).write_text(text)
        print(f"{out / name}: {len(text.splitlines())} line(s)")

    write("scontrol_config.txt", slurm("scontrol", "show", "config").stdout)
    write("scontrol_partitions.txt", slurm("scontrol", "--all", "--oneliner", "show", "partition").stdout)
    write("sinfo_time_limit.txt", slurm("sinfo", "-h", "-p", "t4", "-o", "%l").stdout)

    # the probe account's own GrpTRESRunMins, and two user associations that must not count
    slurm("sacctmgr", "-i", "add", "account", "enf_probe", f"cluster={cluster}", check=False)
    slurm("sacctmgr", "-i", "add", "user", "alice,bob", "account=enf_probe", f"cluster={cluster}", check=False)
    slurm(
        "sacctmgr", "-i", "add", "user", "bob", "account=enf_probe", "partition=t4", f"cluster={cluster}", check=False
    )
    slurm(
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "enf_probe",
        "where",
        f"cluster={cluster}",
        "set",
        "GrpTRESRunMins=cpu=1000,gres/gpu=0,gres/shard=0",
    )
    slurm("sacctmgr", "-i", "modify", "user", "alice", "where", "account=enf_probe", "set", "GrpTRESRunMins=cpu=5")
    assoc = slurm(
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "assoc",
        "where",
        f"cluster={cluster}",
        "account=enf_probe",
        f"format={','.join(parsers.ASSOC_FIELDS)}",
    ).stdout
    write("sacctmgr_assoc.txt", assoc)

    # a GPU job of vision's: squeue's record while it runs, sacct's once it ended
    job = submit("-p", "t4", "-A", "vision", "--gres=gpu:1", "-t", "1", "--wrap", "sleep 8")
    while "RUNNING" not in (sq := slurm(*queries.squeue_argv([job]), time_format=queries.TIME_FORMAT).stdout):
        time.sleep(0.5)
    write("squeue.txt", sq)
    while "COMPLETED" not in (sa := slurm(*queries.sacct_argv([job]), time_format=queries.TIME_FORMAT).stdout):
        time.sleep(1)
    write("sacct.txt", sa)

    forged = submit(
        "-p", "t4", "-A", "vision", "-t", "1", "--comment", "x TRES=cpu=1 TimeLimit=00:00:01", "--wrap", "true"
    )
    write("scontrol_forged_comment.txt", slurm("scontrol", "show", "job", "-o", str(forged)).stdout)

    # sbatch --test-only with a100 busy (a start later), and two it refuses
    busy = submit("-p", "a100", "-A", "vision", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 60")
    script = "#!/bin/sh\n#SBATCH -p a100\n#SBATCH -A vision\n#SBATCH --gres=gpu:1\n#SBATCH -t 5\ntrue\n"
    cases: dict[str, list[dict[str, object]]] = {"started": [], "refused": []}
    res = subprocess.run(
        [str(bin_dir / "sbatch"), "--test-only"],
        input=script,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": "%s"},
    )
    cases["started"].append({"stderr": res.stderr, "start": parsers.will_run_start(res.stderr)})
    for args in (["-C", "no-such-feature"], ["-A", "nobody-acct"]):
        res = subprocess.run(
            [str(bin_dir / "sbatch"), "--test-only", *args],
            input=script,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "SLURM_TIME_FORMAT": "%s"},
        )
        cases["refused"].append({"args": args, "stderr": res.stderr, "rc": res.returncode})
    write("sbatch_test_only.json", json.dumps(cases, indent=1) + "\n")
    slurm("scancel", str(busy), check=False)


if __name__ == "__main__":
    main(sys.argv[1])
