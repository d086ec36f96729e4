"""A backup controller, on Slurm 22.05 and the shared MariaDB ledger: one cluster (``yoloha``) with two
slurmctld, each on a "host" of its own that this test makes (a UTS and mount namespace: its own host
name, its own run, log and slurm-yolo state folders, its own hookd), at its own loopback address,
sharing Slurm's StateSaveLocation and the ledger, as a site's two controller hosts share them.

A 200-task GPU array runs while the primary host dies (every process on it killed with SIGKILL: its
slurmctld, its hookd, the hooks they were running), and another while an admin moves control with
``scontrol takeover``. The hooks of whichever controller is in charge hold and settle each run once,
into the same ledger; ``ledger audit`` finds nothing. What each run should have paid is worked out
here from slurmdbd's record of it and the price the test's admin set, never from slurm-yolo's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PRICE, REPO, VENV_BIN, Slurm, cluster_of_release, fund, poll, set_test_prices

pytestmark = pytest.mark.cluster

BASE = Path("/var/lib/slurm-yolo-cluster/ha")  # under the bundled clusters' state, never a site's
CONF = BASE / "etc"
HOSTS = {"ctl-a": "127.0.1.1", "ctl-b": "127.0.1.2"}  # primary, backup
PORT_CTLD, PORT_NODE, PORT_DBD = 6837, 17021, 6819  # slurmdbd: the 22.05 cluster's
GPUS = 16
TASKS = 200
CLIENTS = ("sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "scancel", "sinfo", "sshare")


def slurm_conf() -> str:
    """The cluster's slurm.conf: what both controllers and the node read."""
    hosts = "\n".join(f"SlurmctldHost={name}({addr})" for name, addr in HOSTS.items())
    return f"""# the backup-controller cluster of tests/test_failover_cluster.py
ClusterName=yoloha
{hosts}
CommunicationParameters=NoCtldInAddrAny
SlurmUser=slurm
SlurmctldPort={PORT_CTLD}
AuthType=auth/munge
StateSaveLocation={BASE}/ctld
SlurmdSpoolDir={BASE}/node/spool
SlurmctldPidFile={BASE}/host/run/slurmctld.pid
SlurmctldLogFile={BASE}/host/log/slurmctld.log
SlurmdPidFile={BASE}/node/slurmd.pid
SlurmdLogFile={BASE}/node/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={PORT_DBD}
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
KillWait=5
MinJobAge=600
SlurmctldTimeout=6
SlurmdTimeout=30
PlugStackConfig={CONF}/plugstack.conf
JobSubmitPlugins=lua
PrologSlurmctld={BASE}/slurm-yolo/prolog
EpilogSlurmctld={BASE}/slurm-yolo/epilog
NodeName=ha-gpu-1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={PORT_NODE} CPUs={GPUS} RealMemory=16000 Gres=gpu:a100:{GPUS} State=UNKNOWN
PartitionName=a100 Nodes=ha-gpu-1 Default=YES MaxTime=INFINITE State=UP
"""


def write_site(shared: Slurm) -> Slurm:
    """The cluster's files, as a site deploys them to both controller hosts: slurm.conf and friends,
    client wrappers that name it, the slurm-yolo config (the shared ledger's option file, each host's
    own state folder and hookd socket at the same path) and the hook wrappers."""
    for sub in ("etc", "bin", "dev", "slurm-yolo", "node/spool", "host"):
        (BASE / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("ctld", *(f"hosts/{h}/{d}" for h in (*HOSTS, "admin") for d in ("run", "log", "state"))):
        (BASE / sub).mkdir(parents=True, exist_ok=True)
        shutil.chown(BASE / sub, "slurm", "slurm")
    for i in range(GPUS):
        dev = BASE / "dev" / f"nvidia{i}"
        if not dev.is_char_device():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))
    (CONF / "slurm.conf").write_text(slurm_conf())
    (CONF / "gres.conf").write_text("".join(f"NodeName=ha-gpu-1 Name=gpu Type=a100 File={BASE}/dev/nvidia{i}\n"
                                            for i in range(GPUS)))  # fmt: skip
    (CONF / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
    (CONF / "plugstack.conf").write_text("")
    # what each controller host resolves its own name with (NoCtldInAddrAny: it listens there alone)
    names = "".join(f"{addr} {name}\n" for name, addr in HOSTS.items())
    (CONF / "hosts").write_text(Path("/etc/hosts").read_text() + names)
    for name in CLIENTS:
        wrapper = BASE / "bin" / name
        wrapper.write_text(f"#!/bin/sh\nSLURM_CONF={CONF}/slurm.conf exec /usr/bin/{name} \"$@\"\n")
        wrapper.chmod(0o755)
    config = shared.config_path.read_text().replace(
        f'state_dir = "{shared.state_dir}"', f'state_dir = "{BASE}/host/state"'
    ).replace("spank_tokens = true", f'spank_tokens = false\nbin_dir = "{BASE}/bin"')
    assert f"{BASE}/host/state" in config and 'backend = "mariadb"' in config
    config += f'\n[hookd]\nsocket = "{BASE}/host/run/hookd.sock"\n'
    (BASE / "slurm-yolo" / "config.toml").write_text(config)
    for event in ("prolog", "epilog"):
        hook = BASE / "slurm-yolo" / event
        hook.write_text(f"#!/bin/sh\nunset SLURM_YOLO_HOME\nSLURM_YOLO_CONFIG={BASE}/slurm-yolo/config.toml\n"
                        f"SLURM_YOLO_HOOKD_SOCKET={BASE}/host/run/hookd.sock\n"
                        "export SLURM_YOLO_CONFIG SLURM_YOLO_HOOKD_SOCKET\nexec /opt/slurm-yolo/bin/slurm-yolo-hook \"$@\"\n")  # fmt: skip
        hook.chmod(0o755)
    ha = Slurm("22.05", "yoloha", Path("/"), BASE / "bin", BASE / "slurm-yolo" / "config.toml", BASE / "host" / "state")
    script = ha.cli("ledger", "admission-script", "--cluster", "yoloha").stdout
    (CONF / "job_submit.lua").write_text(script)
    return ha


class Host:
    """A controller host: a process holding a UTS and mount namespace, in which ``BASE/host`` is this
    host's own folder (run, log, slurm-yolo state) and the host name is its SlurmctldHost name."""

    def __init__(self, name: str) -> None:
        self.name = name
        mine = BASE / "hosts" / name
        self.holder = subprocess.Popen(
            ["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
             f"mount --bind {mine} {BASE}/host && mount --bind {CONF}/hosts /etc/hosts && hostname {name} && echo ready && exec sleep infinity"],
            stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        assert self.holder.stdout is not None and self.holder.stdout.readline().strip() == "ready"
        self.ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")

    def run(self, *argv: str, env: dict[str, str] | None = None, background: bool = False) -> None:
        """``argv`` on this host, as root; in the background a daemon that stays (its log on the host)."""
        full = ["nsenter", "-t", str(self.holder.pid), "-u", "-m", "--", "env",
                f"SLURM_CONF={CONF}/slurm.conf", f"SLURM_YOLO_CONFIG={BASE}/slurm-yolo/config.toml",
                *(f"{k}={v}" for k, v in (env or {}).items()), *argv]  # fmt: skip
        if background:
            with open(BASE / "hosts" / self.name / "log" / f"{Path(argv[0]).name}.out", "ab") as log:
                subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        else:
            subprocess.run(full, check=True, capture_output=True, timeout=120)

    def boot(self) -> None:
        """The host comes up: hookd, the balances job_submit.lua reads, then slurmctld."""
        sock = BASE / "hosts" / self.name / "run" / "hookd.sock"
        sock.unlink(missing_ok=True)
        self.run(str(VENV_BIN / "slurm-yolo"), "hookd", background=True)
        poll(f"hookd on {self.name}", sock.is_socket, 30)
        self.run(str(VENV_BIN / "slurm-yolo"), "ledger", "publish")
        self.run("/usr/sbin/slurmctld", "-i")

    def processes(self) -> list[int]:
        """Every process on this host but the one holding it."""
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.holder.pid:
                try:
                    if os.readlink(entry / "ns" / "mnt") == self.ns:
                        out.append(int(entry.name))
                except OSError:
                    continue
        return out

    def die(self) -> None:
        """The host loses power: every process on it is killed at once (SIGKILL), its disk stays."""
        while pids := self.processes():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def remove(self) -> None:
        self.die()
        self.holder.kill()
        self.holder.wait()


@pytest.fixture(scope="module")
def ha() -> Iterator[tuple[Slurm, dict[str, Host]]]:
    shared = cluster_of_release("22.05")
    if shared.config()["ledger"]["backend"] != "mariadb":
        pytest.skip("a backup controller needs the shared MariaDB ledger (MINICLUSTER_LEDGER=sqlite)")
    ha = write_site(shared)
    sacctmgr = ["/usr/bin/sacctmgr", "-i"]
    if "yoloha" not in subprocess.run([*sacctmgr, "-n", "-P", "show", "cluster", "format=cluster"],
                                      capture_output=True, text=True, check=True).stdout.split():  # fmt: skip
        subprocess.run([*sacctmgr, "add", "cluster", "yoloha"], check=True, capture_output=True)
    subprocess.run([*sacctmgr, "add", "account", "vision", "cluster=yoloha"], capture_output=True)  # exits 1 if there
    for user in ("root", "alice"):
        subprocess.run([*sacctmgr, "add", "user", user, "account=vision", "cluster=yoloha"], capture_output=True)
    hosts: dict[str, Host] = {}
    slurmd: subprocess.Popen[bytes] | None = None
    env = os.environ | {"SLURM_CONF": f"{CONF}/slurm.conf"}
    try:
        with open(BASE / "node" / "slurmd.out", "ab") as log:
            slurmd = subprocess.Popen(["/usr/sbin/slurmd", "-D", "-N", "ha-gpu-1"], env=env, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log, start_new_session=True)  # fmt: skip
        for name in HOSTS:
            hosts[name] = Host(name)
            hosts[name].boot()
        poll("both controllers up", lambda: "DOWN" not in (out := ha.cmd("scontrol", "ping", check=False).stdout)
             and out.count("UP") == 2, 60)  # fmt: skip
        poll("the node idle", lambda: ha.cmd("sinfo", "-h", "-N", "-o", "%T").stdout.strip() == "idle", 90)
        set_test_prices(shared)  # one price list for the grant (the 22.05 cluster has every partition)
        fund(ha, ("vision",), 10**15)
        yield ha, hosts
    finally:
        ha.cmd("scancel", "-A", "vision", check=False)
        for host in hosts.values():
            host.remove()
        if slurmd is not None:
            slurmd.kill()
            slurmd.wait()
        fund(shared, ("vision",), 10**15)


def test_smoke(ha: tuple[Slurm, dict[str, Host]]) -> None:
    slurm, hosts = ha
    print(slurm.cmd("scontrol", "ping").stdout)
    job = slurm.sbatch("-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "1", script="sleep 1")
    print(slurm.settled(job))
