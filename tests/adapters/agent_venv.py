"""The OpenAI Agents SDK's venv: where test_openai_agents.py runs its agent, and .ci/run type-checks
vouch_client.adapters.openai_agents.

The SDK's import name is `agents`, the name of the Vouch server's own package, so the SDK never goes into the
server's environment. As a user's agent would, this venv holds `vouch-client[openai-agents]` and nothing of the
server; the client is installed editable, so the agent runs this checkout's adapter. Made once under
.cache/venvs/, and again when vouch-client/pyproject.toml changes (its hash is in the folder's name).

`python -m tests.adapters.agent_venv` makes it if needed and prints its python's path (.ci/run uses it)."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "vouch-client"
VENVS = ROOT / ".cache" / "venvs"
# What pip installs, from the package registry; a change here or in the client's pyproject makes a new venv.
REQUIREMENT = f"{CLIENT}[openai-agents]"


def _key() -> str:
    digest = hashlib.sha256((CLIENT / "pyproject.toml").read_bytes())
    digest.update(f"{REQUIREMENT}\n{sys.version_info[:2]}".encode())
    return digest.hexdigest()[:16]


def openai_agents_python() -> Path:
    """The venv's python, the venv made first if it is missing or was made from another pyproject."""
    VENVS.mkdir(parents=True, exist_ok=True)
    # Checkouts that share one .cache (git worktrees) each have a venv of their own (the client is installed from
    # the checkout), and replace only their own stale one: never a venv another checkout's tests are running.
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
    folder = VENVS / f"openai-agents-{checkout}-{_key()}"
    python = folder / "bin" / "python"
    # .ci/run and a test session, or a session's xdist workers, may all ask; one makes it, the others wait for it.
    with (VENVS / "openai-agents.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "ready").exists():
            return python
        for stale in VENVS.glob(f"openai-agents-{checkout}-*"):
            shutil.rmtree(stale)
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", REQUIREMENT], check=True)
        # Outside the checkout, `agents` must be the SDK and the server must not be there at all.
        subprocess.run(
            [str(python), "-c", "import sys, agents, importlib.util as u; "
             "assert agents.__file__.startswith(sys.prefix), agents.__file__; "
             "assert not [m for m in ('core', 'api', 'review', 'chat', 'quart') if u.find_spec(m)]"],
            cwd=folder, check=True,
        )
        (folder / "ready").touch()
    return python


if __name__ == "__main__":
    print(openai_agents_python())
