"""A network partition that drops packets (never refuses them): the TCP packets that processes of
one user send to one port on loopback are dropped by an iptables rule (its owner match), until
the rule is deleted. A replica run under that user (:func:`as_uid`) is cut off from that server
while everything else on the machine reaches it. Needs root and iptables (``.ci/run`` installs
it); the rule names only 127.0.0.1's loopback interface and the test's own port.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The user a cut-off replica runs as: a number no account on the machine has, so no other
# process's packets match the rule.
CUT_UID = 64_123


def as_uid(uid: int = CUT_UID) -> tuple[str, ...]:
    """The command prefix that runs a program as ``uid`` (util-linux's setpriv)."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run a replica as another user"
    return (setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups")


def open_dir(prefix: str) -> Path:
    """A directory every user may enter and write (the working directory and HOME of a process
    run as another user)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o777)
    return path


def _rule(port: int, uid: int) -> list[str]:
    return [
        "OUTPUT", "-o", "lo", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port),
        "-m", "owner", "--uid-owner", str(uid), "-j", "DROP",
    ]  # fmt: skip


def _iptables(*args: str) -> None:
    iptables = shutil.which("iptables")
    assert iptables is not None, "iptables is needed to drop packets (apt-get install iptables)"
    done = subprocess.run([iptables, "-w", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"iptables {' '.join(args)}: {done.stderr.strip()}"


@contextmanager
def dropped(port: int, uid: int = CUT_UID) -> Iterator[None]:
    """While inside: every TCP packet ``uid``'s processes send to 127.0.0.1:``port`` is
    dropped (their connections there stall, none is refused); after, they flow again."""
    _iptables("-I", *_rule(port, uid))
    try:
        yield
    finally:
        _iptables("-D", *_rule(port, uid))
