"""Distributed search on Ray (Mirhoseini et al. 2017, §3.4, Figure 3): a parameter server holding only the
policy's parameters, several controllers with their own baselines, and ``K`` evaluation workers each.

Each controller alternates two phases: it samples ``K`` placements with the current policy and sends one
to each of its workers; the workers score them (simulate, or run and measure) and answer; the controller
turns the step times into a REINFORCE gradient and sends it to the parameter server, which applies it
(asynchronously: other controllers' gradients land in between) and returns the new parameters.

A worker that dies mid-search (its actor killed, its node lost) is replaced by a new one and the
placement it held is sent again; the search goes on. Distributed runs are not reproducible for a seed
(the order in which gradients reach the server varies); the single-process mode is.

Ray is optional: :func:`ray_session` imports it, and starts a local Ray (``address=None``) or joins a
cluster (``address="host:port"``, ``"ray://host:port"`` or ``"auto"``). Ray itself waits without end for
an address where nothing answers; :func:`ray_session` first opens a TCP connection to it and fails with
one line where none opens within :data:`CONNECT_TIMEOUT_S` seconds (an address that accepts the
connection but is no Ray cluster is left to Ray, which gave up after about 20 s on this machine).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from autoplace.env import make_env
from autoplace.errors import AutoplaceError
from autoplace.search.evaluation import CachedScorer, score_batch

__all__ = ["ray_session", "ParameterServer", "EvalWorker", "RayScorer", "CONNECT_TIMEOUT_S"]

#: seconds to wait for a Ray address to accept a connection (``AUTOPLACE_RAY_CONNECT_TIMEOUT_S`` overrides)
CONNECT_TIMEOUT_S = 10.0


def _bootstrap_address(address: str) -> str | None:
    """The ``host:port`` ``address`` names (``auto``: the ``RAY_ADDRESS`` environment variable, else the
    local cluster Ray last started); ``None`` where there is none to probe."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address:
            current = os.path.join("/tmp", "ray", "ray_current_cluster")
            try:
                with open(current) as f:
                    address = f.read().strip()
            except OSError:
                return None                               # no local cluster: ray.init says so at once
    return address.split("://", 1)[-1] or None


def check_answers(address: str, timeout_s: float | None = None) -> None:
    """:class:`AutoplaceError` unless ``address`` (``host:port``) accepts a TCP connection within
    ``timeout_s`` seconds (default :data:`CONNECT_TIMEOUT_S`)."""

    if timeout_s is None:
        raw = os.environ.get("AUTOPLACE_RAY_CONNECT_TIMEOUT_S", str(CONNECT_TIMEOUT_S))
        try:
            timeout_s = float(raw)
        except ValueError:
            timeout_s = -1.0
        if not 0 < timeout_s <= 3600:
            raise AutoplaceError(f"AUTOPLACE_RAY_CONNECT_TIMEOUT_S must be seconds in (0, 3600], got {raw!r}")
    target = _bootstrap_address(address)
    if target is None:
        return
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise AutoplaceError(f"--ray-address {address!r}: not host:port")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except TimeoutError:
        raise AutoplaceError(f"Ray at {address!r} does not answer (no connection within {timeout_s:g} s)") from None
    except (OSError, UnicodeError, ValueError) as e:               # refused, unreachable, no such host name
        raise AutoplaceError(f"Ray at {address!r} does not answer ({getattr(e, 'strerror', None) or e})") from None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Ray, initialised for the duration (a session already up is used as it is and left running)."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is installed with the package's [ray] extra
        raise AutoplaceError("distributed search needs Ray: pip install 'autoplace[ray]'") from None
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if address is not None:
        check_answers(address)
        kwargs["address"] = address
    elif num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(**kwargs)
    except Exception as e:  # a bad address, a cluster that does not answer
        raise AutoplaceError(f"cannot start or join Ray{f' at {address!r}' if address else ''}: {e}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


class ParameterServer:
    """Holds the policy's parameters and its optimizer; applies each gradient as it arrives (run as a Ray
    actor). ``make_policy()`` builds the policy (the same initial parameters as the controllers'),
    ``make_optimizer(params)`` its optimizer. It also counts the samples the controllers report, so that
    they stop on one shared budget."""

    def __init__(self, make_policy: Callable[[], Any], make_optimizer: Callable[[Any], Any]):
        self.policy = make_policy()
        self.optimizer = make_optimizer(self.policy.parameters())
        self.samples = 0
        self.updates = 0

    def parameters(self) -> tuple[dict, int]:
        """The current parameters and the samples counted so far."""
        return self.policy.state_dict(), self.samples

    def state(self) -> dict:
        """Parameters, optimizer state and counters, for a checkpoint."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "samples": self.samples, "updates": self.updates}

    def load(self, state: dict) -> None:
        """Continue from :meth:`state`."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.samples, self.updates = state["samples"], state["updates"]

    def apply(self, grads: list | None, samples: int) -> tuple[dict, int]:
        """Apply one controller's gradients (``None``: none this time) for ``samples`` samples; return the
        new parameters and the total samples."""
        if grads is not None:
            for p, g in zip(self.policy.parameters(), grads):
                p.grad = g
            self.optimizer.step()
            self.updates += 1
        self.samples += samples
        return self.policy.state_dict(), self.samples


class EvalWorker:
    """Scores op placements of one graph on one env (run as a Ray actor): ``[B, n_ops]`` device indices ->
    step times (``inf`` where a placement failed) and whether each ran."""

    def __init__(self, graph, cluster, env: str = "simulated", env_kwargs: dict | None = None):

        self.env = make_env(env, graph, cluster, **(env_kwargs or {}))

    def evaluate(self, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return score_batch(self.env, op_devices)

    def pid(self) -> int:
        return os.getpid()


class RayScorer(CachedScorer):
    """A controller's ``n`` evaluation workers, with the evaluator's interface (group placements in,
    :class:`Scores` out) and its cache; a worker that dies is replaced and its placements sent again.
    ``replaced`` counts the replacements."""

    def __init__(self, ray, grouping, graph, cluster, n: int, env: str = "simulated", env_kwargs: dict | None = None):
        super().__init__(grouping)
        self.env_name = env
        self.ray = ray
        self._spawn = lambda: ray.remote(num_cpus=0, max_restarts=0)(EvalWorker).remote(graph, cluster, env, env_kwargs)
        self.workers = [self._spawn() for _ in range(n)]
        self.replaced = 0

    def score_ops(self, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = self._run(list(op_devices))
        return np.array([s for s, _ in out]), np.array([r for _, r in out], dtype=bool)

    def _run(self, placements: list[np.ndarray]) -> list[tuple[float, bool]]:
        """One placement per worker (round-robin); a dead worker's placements go to its replacement."""
        from ray.exceptions import RayActorError

        out: list[tuple[float, bool] | None] = [None] * len(placements)
        pending = list(range(len(placements)))
        while pending:
            calls = {}
            for j, i in enumerate(pending):
                w = j % len(self.workers)
                calls[i] = (w, self.workers[w].evaluate.remote(placements[i][None, :]))
            pending = []
            for i, (w, ref) in calls.items():
                try:
                    step, ok = self.ray.get(ref)
                    out[i] = (float(step[0]), bool(ok[0]))
                except RayActorError:
                    self._replace(w)
                    pending.append(i)
        return out  # type: ignore[return-value]

    def _replace(self, w: int) -> None:
        """A new worker in slot ``w`` (once per dead worker, however many calls it failed)."""
        try:
            self.ray.get(self.workers[w].pid.remote(), timeout=5)
            return                                       # it answers: already replaced
        except Exception:
            pass
        self.workers[w] = self._spawn()
        self.replaced += 1

    def close(self) -> None:
        for w in self.workers:
            self.ray.kill(w)
