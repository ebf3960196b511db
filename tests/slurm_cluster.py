"""A real one-node SLURM cluster in a temporary folder, for the `slurm` tests.

munged (with its own key and socket), slurmctld and slurmd run as root in the foreground from Debian's
slurm-wlm and munge packages, with state, spool and logs in the folder and ports chosen free. Every
process is started here and stopped here by its pid: the daemons, and whatever still runs with this
cluster's SLURM_CONF in its environment (a job's slurmstepd, a task's process) when it stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
PACKAGES = "slurm-wlm munge"


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


def slurm_version() -> str:
    """`sbatch --version` says 'slurm 22.05.8'."""
    return subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=False).stdout.strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slurm_conf(root: Path, node: str, cpus: int, munge_socket: Path) -> str:
    """A one-node cluster: everything in `root`, no cgroups (linuxproc, task/none), no accounting database."""
    return f"""\
ClusterName=attnbench-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    root: Path
    node: str
    env: dict[str, str]
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> str:
        return self.env["SLURM_CONF"]

    def run(self, *words: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command with this cluster's SLURM_CONF, its output captured."""
        result = subprocess.run(list(words), env=self.env, capture_output=True, text=True, timeout=timeout,
                                check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(words)} exited {result.returncode}: {result.stderr.strip()}\n"
                                 f"{self.logs()}")
        return result

    def states(self) -> dict[str, str]:
        """Every job and array task still known to squeue: {'12_1': 'RUNNING', '13': 'PENDING'}."""
        lines = self.run("squeue", "-r", "-h", "-o", "%i|%T").stdout.splitlines()
        return dict(line.split("|", 1) for line in lines if "|" in line)

    def wait_gone(self, job: str, deadline: float) -> None:
        """Until `job` (and every task of it) has left the queue; fails at `deadline` (time.monotonic)."""
        while time.monotonic() < deadline:
            if not any(key == job or key.startswith(f"{job}_") for key in self.states()):
                return
            time.sleep(0.25)
        raise AssertionError(f"job {job} still queued or running at the deadline: {self.states()}\n{self.logs()}")

    def logs(self, lines: int = 15) -> str:
        """The last lines of each daemon's log, for a failure message."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / name
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons and anything else running under this cluster, by pid."""
        if self.daemons and all(d.poll() is None for d in self.daemons):
            try:
                self.run("scancel", "--user", "root", check=False, timeout=10)
                deadline = time.monotonic() + 15
                while self.states() and time.monotonic() < deadline:
                    time.sleep(0.25)
            except (subprocess.SubprocessError, AssertionError):
                pass
        for daemon in reversed(self.daemons):  # slurmd, slurmctld, then munged
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(10)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(5)
        for pid in processes_with_env(f"SLURM_CONF={self.conf}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def processes_with_env(entry: str) -> list[int]:
    """Pids of the processes (other than this one) whose environment holds exactly `entry`."""
    wanted = entry.encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if wanted in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def start(root: Path, cpus: int, ready_within_s: float = 30) -> Cluster:
    """Start munged, slurmctld and slurmd in `root` and wait until the node is idle; stopped again on failure."""
    node = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    munge_socket = root / "munge" / "munge.socket"
    (root / "slurm.conf").write_text(slurm_conf(root, node, cpus, munge_socket))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = Cluster(root, node, env)
    try:
        cluster.daemons.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={munge_socket}", f"--key-file={key}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munged.log",
             f"--seed-file={root}/munge/munged.seed"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while not munge_socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            cluster.daemons.append(subprocess.Popen(daemon, env=env, stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + ready_within_s
        while time.monotonic() < deadline:
            dead = [d.args[0] for d in cluster.daemons if d.poll() is not None]
            if dead:
                raise AssertionError(f"{', '.join(dead)} exited at start\n{cluster.logs()}")
            if cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle":
                return cluster
            time.sleep(0.25)
        raise AssertionError(f"the node was not idle within {ready_within_s:g} s\n{cluster.logs()}")
    except BaseException:
        cluster.stop()
        raise
