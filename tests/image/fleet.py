"""Containers of the cfp image as hosts, driven through the container engine's command line
(`podman` or `docker`, as `make image-test` chose: $CFP_ENGINE), as an operator would."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests import patience

ENGINE = os.environ.get("CFP_ENGINE", "podman")
HOST_IMAGE = os.environ.get("CFP_HOST_IMAGE", "cfp:host")  # `make image`'s two images
SPARK_IMAGE = os.environ.get("CFP_SPARK_IMAGE", "cfp:spark")
PLUGINS = Path(__file__).resolve().parent  # paced.py, mounted as the hosts' own observer


def engine(*args: str, check: bool = True) -> str:
    """What `ENGINE ARGS` printed, once it ends (as long as the test may wait)."""
    done = subprocess.run(
        [ENGINE, *args], capture_output=True, text=True, timeout=patience.left_s(), check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{ENGINE} {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


@dataclass
class Fleet:
    """Hosts of one processor, each a container on the host network (Azurite's loopback
    address is the same inside), with a read-only root filesystem and a writable /tmp, as the
    Kubernetes manifests run them. Deliveries go to `out` (mounted), one file per host."""

    conn: str
    processor: str
    out: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # containers started: port (0: none)

    def start(self, name: str, port: int, *extra: str) -> None:
        """A host: `cfp run` for the fleet's processor, its endpoints on `port`."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.out.chmod(0o777)  # the image's user (uid 10001) writes here
        self.launch(
            name, "run", "--processor-name", self.processor, *self.args, *extra,
            env={
                "CFP_HOST_NAME": name,  # as the manifests set it (the pod's name)
                "CFP_HTTP_PORT": str(port),
                "CFP_OBSERVER": "paced:PacedJsonl",
                "CFP_TEST_OUT": "/out",
                "PYTHONPATH": "/plugins",
            },
        )  # fmt: skip
        self.ports[name] = port

    def launch(
        self,
        name: str,
        *argv: str,
        env: dict[str, str],
        image: str = HOST_IMAGE,
        entrypoint: str = "cfp",
    ) -> None:
        """A container of `image` named for `name` running `ENTRYPOINT ARGV` in the
        background."""
        args = self._container_args(name, argv, env, image)
        engine("run", "--detach", "--entrypoint", entrypoint, *args)
        self.ports.setdefault(name, 0)

    def run(self, name: str, *argv: str, image: str = HOST_IMAGE) -> str:
        """`cfp ARGV` in a container of `image` named for `name`, in the foreground, removed
        after; what it printed (whatever its exit status)."""
        return engine("run", "--rm", *self._container_args(name, argv, {}, image), check=False)

    def _container_args(
        self, name: str, argv: tuple[str, ...], env: dict[str, str], image: str
    ) -> list[str]:
        variables = {"CFP_CONNECTION_STRING": self.conn, **env, **self.env}
        return [
            "--name", self.container(name), "--network=host", "--read-only", "--tmpfs", "/tmp",
            *(["--ulimit", "host"] if ENGINE == "podman" else []),
            *(["-v", f"{self.out}:/out"] if self.out.exists() else []),
            "-v", f"{PLUGINS}:/plugins:ro",
            *(arg for key, value in variables.items() for arg in ("-e", f"{key}={value}")),
            image, *argv,
        ]  # fmt: skip

    def container(self, name: str) -> str:
        return f"cfp-test-{self.processor}-{name}"

    def kill(self, name: str) -> None:
        engine("kill", "--signal", "KILL", self.container(name))

    def freeze(self, name: str) -> None:
        """SIGSTOP to every process of the container but its first (a Spark worker's
        executors, not the worker): what runs there stays as it is until `thaw` or `kill`."""
        engine("exec", self.container(name), "bash", "-c", "kill -STOP -1")

    def thaw(self, name: str) -> None:
        engine("exec", self.container(name), "bash", "-c", "kill -CONT -1")

    def stop(self, name: str, grace_s: int) -> None:
        """SIGTERM, then SIGKILL after `grace_s` seconds (what `docker stop` and a pod's
        deletion do)."""
        engine("stop", "--time", str(grace_s), self.container(name))

    def wait(self, name: str) -> int:
        return int(engine("wait", self.container(name)).strip().splitlines()[-1])

    def logs(self, name: str) -> str:
        """What the host wrote (its log goes to stderr, which `logs` gives back on stderr)."""
        done = subprocess.run(
            [ENGINE, "logs", self.container(name)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=patience.left_s(), check=False,
        )  # fmt: skip
        return done.stdout

    def log_events(self, name: str) -> Iterator[dict[str, object]]:
        for line in self.logs(name).splitlines():
            if line.startswith("{"):
                yield json.loads(line)

    def user(self, name: str) -> str:
        return engine("inspect", "--format", "{{.Config.User}}", self.container(name)).strip()

    def delivered(self) -> list[str]:
        """The ids delivered, in every host's file (a host killed mid-line leaves a torn last
        line: not a delivery, its checkpoint did not move past it)."""
        ids = []
        for path in sorted(self.out.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    ids.append(json.loads(line)["id"])
                except ValueError:
                    continue
        return ids

    def remove_all(self) -> None:
        for name in self.ports:
            engine("rm", "--force", self.container(name), check=False)
